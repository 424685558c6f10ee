// validate() and parse_schedule_kind(): bad specs are InputErrors with a one-line reason.
#include <boost/test/unit_test.hpp>

#include "core/error.h"
#include "pipeline/schedule.h"

using namespace pw::pipeline;

namespace {

std::string rejection(const ScheduleSpec& spec) {
  try {
    validate(spec);
  } catch (const pw::InputError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

BOOST_AUTO_TEST_SUITE(schedule_validate)

BOOST_AUTO_TEST_CASE(accepts_the_documented_ranges) {
  BOOST_CHECK_NO_THROW(validate({ScheduleKind::GPipe, 4, 1, 1}));   // GPipe: any M >= 1
  BOOST_CHECK_NO_THROW(validate({ScheduleKind::OneFOneB, 4, 4, 1}));
  BOOST_CHECK_NO_THROW(validate({ScheduleKind::ZeroBubbleH1, 4, 5, 1}));
  BOOST_CHECK_NO_THROW(validate({ScheduleKind::Interleaved, 4, 8, 2}));
  BOOST_CHECK_NO_THROW(validate({ScheduleKind::Interleaved, 1, 3, 3}));
}

BOOST_AUTO_TEST_CASE(rejects_fewer_micro_batches_than_stages_where_needed) {
  for (ScheduleKind kind : {ScheduleKind::OneFOneB, ScheduleKind::ZeroBubbleH1}) {
    const std::string msg = rejection({kind, 4, 3, 1});
    BOOST_TEST(contains(msg, schedule_kind_name(kind) + " schedule: 3 micro-batches for 4 stages"), msg);
    BOOST_TEST(contains(msg, "micro-batches >= stages"), msg);
  }
  BOOST_TEST(contains(rejection({ScheduleKind::Interleaved, 4, 2, 2}), "2 micro-batches for 4 stages"));
}

BOOST_AUTO_TEST_CASE(rejects_bad_interleaving) {
  BOOST_TEST(contains(rejection({ScheduleKind::Interleaved, 2, 4, 1}), "1 chunk(s) per stage; it needs at least 2"));
  BOOST_TEST(contains(rejection({ScheduleKind::Interleaved, 4, 6, 2}), "6 micro-batches is not a multiple of 4 stages"));
  BOOST_TEST(contains(rejection({ScheduleKind::OneFOneB, 2, 4, 2}), "2 chunks per stage; it takes exactly 1 (only interleaved and V schedules take more)"));
  BOOST_TEST(contains(rejection({ScheduleKind::GPipe, 2, 4, 0}), "0 chunks per stage; it takes exactly 1"));
}

BOOST_AUTO_TEST_CASE(rejects_empty_pipelines) {
  BOOST_TEST(contains(rejection({ScheduleKind::GPipe, 0, 4, 1}), "0 pipeline stages; need at least 1"));
  BOOST_TEST(contains(rejection({ScheduleKind::GPipe, 2, 0, 1}), "0 micro-batches; need at least 1"));
}

BOOST_AUTO_TEST_CASE(stage_schedule_validates_its_inputs) {
  BOOST_CHECK_THROW(stage_schedule({ScheduleKind::OneFOneB, 4, 2, 1}, 0), pw::InputError);
  BOOST_CHECK_THROW(stage_schedule({ScheduleKind::OneFOneB, 2, 2, 1}, 2), pw::InputError);
}

BOOST_AUTO_TEST_CASE(rejects_unknown_kind_listing_the_accepted_ones) {
  try {
    parse_schedule_kind("pipedream");
    BOOST_ERROR("expected InputError");
  } catch (const pw::InputError& e) {
    BOOST_TEST(std::string(e.what()) == "unknown schedule 'pipedream'; accepted: gpipe, 1f1b, interleaved, zb-h1, zb-h2, zb-v, v-half, v-min, interleaved-zb, dualpipev");
  }
  BOOST_CHECK_THROW(parse_schedule_kind("1F1B"), pw::InputError);   // names are exact
}

BOOST_AUTO_TEST_CASE(virtual_stages_interleave_chunks_across_stages) {
  const ScheduleSpec spec{ScheduleKind::Interleaved, 4, 8, 2};
  BOOST_TEST(virtual_stage(spec, 0, 0) == 0);
  BOOST_TEST(virtual_stage(spec, 3, 0) == 3);
  BOOST_TEST(virtual_stage(spec, 0, 1) == 4);
  BOOST_TEST(virtual_stage(spec, 3, 1) == 7);
  BOOST_CHECK_THROW(virtual_stage(spec, 0, 2), pw::Error);
}

BOOST_AUTO_TEST_SUITE_END()
