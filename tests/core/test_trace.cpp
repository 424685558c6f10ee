// The trace recorder: a bounded ring that keeps the latest spans, a step window, and records from
// many threads at once.
#include <thread>

#include <boost/test/unit_test.hpp>

#include "core/trace.h"

using namespace pw::trace;

namespace {
Span span_at(std::int64_t step, std::int64_t t) {
  Span s;
  s.kind = SpanKind::Forward;
  s.stage = 0;
  s.step = step;
  s.start_ns = t;
  s.end_ns = t + 1;
  return s;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(trace_recorder)

BOOST_AUTO_TEST_CASE(records_nothing_until_enabled_and_only_the_window) {
  Recorder r(16);
  r.record(span_at(0, 1));
  BOOST_TEST(r.snapshot().empty());
  r.enable(2, 4);
  for (int step = 0; step < 6; ++step) r.record(span_at(step, step));
  const auto spans = r.snapshot();
  BOOST_REQUIRE_EQUAL(spans.size(), 2u);
  BOOST_TEST(spans[0].step == 2);
  BOOST_TEST(spans[1].step == 3);
  r.disable();
  r.record(span_at(3, 9));
  BOOST_TEST(r.snapshot().size() == 2u);
}

BOOST_AUTO_TEST_CASE(a_full_ring_keeps_the_latest_spans_and_counts_the_dropped) {
  Recorder r(4);
  r.enable();
  for (int i = 0; i < 10; ++i) r.record(span_at(i, i));
  const auto spans = r.snapshot();
  BOOST_REQUIRE_EQUAL(spans.size(), 4u);
  for (int i = 0; i < 4; ++i) BOOST_TEST(spans[static_cast<std::size_t>(i)].step == 6 + i);
  BOOST_TEST(r.dropped() == 6u);
  r.clear();
  BOOST_TEST(r.snapshot().empty());
}

BOOST_AUTO_TEST_CASE(threads_record_concurrently) {
  Recorder r(100000);
  r.enable();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&r, t] {
      for (int i = 0; i < 5000; ++i) r.record(span_at(t, i));
    });
  for (auto& t : threads) t.join();
  const auto spans = r.snapshot();
  BOOST_TEST(spans.size() == 20000u);
  std::vector<int> per(4, 0);
  for (const auto& s : spans) ++per[static_cast<std::size_t>(s.step)];
  for (int n : per) BOOST_TEST(n == 5000);
}

BOOST_AUTO_TEST_CASE(kind_classes) {
  BOOST_TEST(is_compute(SpanKind::BackwardWeight));
  BOOST_TEST(!is_compute(SpanKind::RecvWait));
  BOOST_TEST(is_communication(SpanKind::AllReduce));
  BOOST_TEST(std::string(span_kind_name(SpanKind::RecvWait)) == "recv-wait");
}

BOOST_AUTO_TEST_SUITE_END()
