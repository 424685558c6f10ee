// The simulator with ranks sharing a host's cores: ops that run at the same time on more threads
// than cores are stretched in proportion, replicas count as ranks, ops measured slower beside the
// others are slowed while others run, and with cores enough and no such slowdown (or ops that
// never overlap) the timings are the plain simulator's.
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "pipeline/shared_cores.h"

using namespace pw::pipeline;

namespace {

CoreSharing cores(int count, int threads = 1, int replicas = 1) { return {count, threads, replicas}; }

const TimedOp& op_of(const SimulationResult& r, int stage, const std::string& text) {
  for (const auto& op : r.timeline[static_cast<std::size_t>(stage)])
    if (instruction_text(op.instruction, 1) == text) return op;
  BOOST_FAIL("stage " << stage << " has no " << text);
  return r.timeline.front().front();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(shared_cores_simulator)

// GPipe, 2 stages, 2 micro-batches, F = B = 1 on one core. Stage 0's F1 and stage 1's F0 run at
// once, at half speed each: both take 2 instead of 1, and so do stage 1's B1 and stage 0's B0.
// Alone: 6 units; sharing one core: 8.
BOOST_AUTO_TEST_CASE(two_stages_on_one_core_take_twice_as_long_where_their_ops_overlap) {
  const ScheduleSpec spec{ScheduleKind::GPipe, 2, 2, 1};
  const auto times = OpTimes::uniform(spec, 1.0, 1.0, 0.0);
  BOOST_TEST(simulate(spec, times).makespan == 6.0, boost::test_tools::tolerance(1e-12));
  const auto shared = simulate(spec, times, cores(1));
  BOOST_TEST(shared.makespan == 8.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(op_of(shared, 0, "F0").end == 1.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(op_of(shared, 0, "F1").start == 1.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(op_of(shared, 0, "F1").end == 3.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(op_of(shared, 1, "F0").end == 3.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(op_of(shared, 1, "F1").end == 4.0, boost::test_tools::tolerance(1e-12));   // alone again
  BOOST_TEST(op_of(shared, 0, "B0").end == 7.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(op_of(shared, 1, "B1").end == 7.0, boost::test_tools::tolerance(1e-12));
  // Busy while running, stretched: stage 0 runs 1 + 2 + 2 + 1.
  BOOST_TEST(shared.stage_busy[0] == 6.0, boost::test_tools::tolerance(1e-12));
  // Two threads a rank on two cores share them the same way.
  BOOST_TEST(simulate(spec, times, cores(2, 2)).makespan == 8.0, boost::test_tools::tolerance(1e-12));
}

// With as many cores as the ranks' threads nothing changes, bit for bit.
BOOST_AUTO_TEST_CASE(enough_cores_give_the_plain_simulation) {
  for (const auto kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::ZeroBubbleH1}) {
    const ScheduleSpec spec{kind, 4, 8, 1};
    auto times = OpTimes::uniform(spec, 1.0, 1.5, 0.5);
    times.send_activation.assign(4, 0.25);
    const auto plain = simulate(spec, times);
    for (const auto sharing : {cores(4), cores(8, 2), cores(16, 2, 2), cores(0, 4, 4)}) {
      const auto shared = simulate(spec, times, sharing);
      BOOST_TEST(shared.makespan == plain.makespan);
      BOOST_TEST(shared.stage_busy == plain.stage_busy, boost::test_tools::per_element());
    }
  }
}

// Ops that never run at the same time (one micro-batch through the pipeline) are not slowed down
// however few the cores: the event simulation gives the plain one's times, transfers included.
BOOST_AUTO_TEST_CASE(ops_that_never_overlap_keep_their_times) {
  for (const int stages : {2, 4}) {
    const ScheduleSpec spec{ScheduleKind::GPipe, stages, 1, 1};
    auto times = OpTimes::uniform(spec, 1.0, 2.0, 0.0);
    times.send_activation.assign(static_cast<std::size_t>(stages), 0.3);
    times.send_gradient.assign(static_cast<std::size_t>(stages), 0.2);
    const auto plain = simulate(spec, times);
    const auto shared = simulate(spec, times, cores(1));
    BOOST_TEST(shared.makespan == plain.makespan, boost::test_tools::tolerance(1e-12));
    for (int s = 0; s < stages; ++s) {
      const auto& a = plain.timeline[static_cast<std::size_t>(s)];
      const auto& b = shared.timeline[static_cast<std::size_t>(s)];
      BOOST_REQUIRE_EQUAL(a.size(), b.size());
      for (std::size_t i = 0; i < a.size(); ++i) {
        BOOST_TEST(instruction_text(b[i].instruction, 1) == instruction_text(a[i].instruction, 1));
        BOOST_TEST(b[i].end == a[i].end, boost::test_tools::tolerance(1e-12));
      }
    }
  }
}

// Every kind, too few cores: no faster than alone, no slower than every op at the lowest rate.
BOOST_AUTO_TEST_CASE(sharing_slows_a_schedule_by_at_most_the_oversubscription) {
  for (const auto kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::ZeroBubbleH1,
                          ScheduleKind::ZeroBubbleH2}) {
    const ScheduleSpec spec{kind, 4, 8, 1};
    const auto times = OpTimes::uniform(spec, 1.0, 1.2, 0.8);
    const auto plain = simulate(spec, times);
    for (const int count : {1, 2, 3}) {
      const auto shared = simulate(spec, times, cores(count));
      BOOST_TEST_CONTEXT(schedule_kind_name(kind) << " on " << count << " cores") {
        BOOST_TEST(shared.makespan > plain.makespan);
        BOOST_TEST(shared.makespan <= plain.makespan * 4.0 / count + 1e-9);
        // The work is done, stretched: no stage is busy for less than alone.
        for (int s = 0; s < 4; ++s) BOOST_TEST(shared.stage_busy[static_cast<std::size_t>(s)] >= plain.stage_busy[static_cast<std::size_t>(s)] - 1e-9);
      }
    }
  }
}

// Replicas are ranks too: one stage twice on one core runs at half speed throughout.
BOOST_AUTO_TEST_CASE(replicas_share_the_cores_as_ranks) {
  const ScheduleSpec spec{ScheduleKind::OneFOneB, 1, 4, 1};
  const auto times = OpTimes::uniform(spec, 1.0, 2.0, 0.0);
  BOOST_TEST(simulate(spec, times, cores(1, 1, 2)).makespan == 2.0 * simulate(spec, times).makespan,
             boost::test_tools::tolerance(1e-12));
  BOOST_TEST(simulate(spec, times, cores(2, 1, 2)).makespan == simulate(spec, times).makespan);
}

// Ops that start together, shortest ending first: 1 and 3 seconds on one core end at 2 and 4.
BOOST_AUTO_TEST_CASE(concurrent_ops_share_the_cores_until_each_ends) {
  BOOST_TEST(concurrent_seconds({1.0, 3.0}, cores(1)) == 4.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(concurrent_seconds({3.0, 1.0}, cores(2)) == 3.0);
  BOOST_TEST(concurrent_seconds({1.0, 3.0}, cores(2, 1, 2)) == 4.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(concurrent_seconds({2.0, 2.0, 2.0}, cores(2)) == 3.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(concurrent_seconds({}, cores(1)) == 0.0);
}

// Slowed down beside the others (CoreSharing::co_run_slowdown): an op of a stage measured 50%
// slower with 2 threads of the job busy runs at 1/1.5 while another runs, at full speed alone, and
// a stage measured no slower keeps its speed whatever runs beside it.
BOOST_AUTO_TEST_CASE(ops_slowed_beside_the_others_run_slower_only_while_others_run) {
  CoreSharing sharing = cores(2);
  sharing.co_run_threads = 2;
  sharing.co_run_slowdown = {0.5, 0.0};
  BOOST_TEST(!sharing.oversubscribed(2));
  BOOST_TEST(sharing.shared(2));
  BOOST_TEST(!sharing.shared(1));   // one rank: nothing beside it
  BOOST_TEST(sharing.rate(1, 0) == 1.0);
  BOOST_TEST(sharing.rate(2, 0) == 1.0 / 1.5, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(sharing.rate(2, 1) == 1.0);
  // Stage 1 ends at 1; stage 0 has done 1/1.5 of its 1 by then, the rest alone.
  BOOST_TEST(concurrent_seconds({1.0, 1.0}, sharing) == 1.0 + 1.0 / 3.0, boost::test_tools::tolerance(1e-12));
  // GPipe, 2 stages, 2 micro-batches, F = B = 1: stage 0's F1 does 2/3 of its work beside stage
  // 1's F0 (which ends at 2) and the rest alone, ending at 2 + 1/3; so does its first backward
  // beside stage 1's last; stage 1's ops keep their times. 6 alone, 6 + 2/3 so.
  const ScheduleSpec spec{ScheduleKind::GPipe, 2, 2, 1};
  const auto times = OpTimes::uniform(spec, 1.0, 1.0, 0.0);
  const auto slowed = simulate(spec, times, sharing);
  BOOST_TEST(op_of(slowed, 0, "F1").end == 2.0 + 1.0 / 3.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(op_of(slowed, 1, "F0").end == 2.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(slowed.makespan == 6.0 + 2.0 / 3.0, boost::test_tools::tolerance(1e-12));
  // Measured no slower anywhere, or at one thread busy: the plain simulation.
  sharing.co_run_slowdown = {0.0, 0.0};
  BOOST_TEST(!sharing.shared(2));
  BOOST_TEST(simulate(spec, times, sharing).makespan == 6.0);
  sharing.co_run_slowdown = {0.5, 0.5};
  sharing.co_run_threads = 1;
  BOOST_TEST(!sharing.shared(2));
  // Four ranks on two cores: half a core each, and slowed as at 2 threads busy (no more were measured).
  CoreSharing four = cores(2);
  four.co_run_threads = 2;
  four.co_run_slowdown = {0.2, 0.2, 0.2, 0.2};
  BOOST_TEST(four.rate(4, 3) == 0.5 / 1.2, boost::test_tools::tolerance(1e-12));
  // Measured with 4 busy on 8 cores: 2 busy slow by a third of it.
  CoreSharing eight = cores(8);
  eight.co_run_threads = 4;
  eight.co_run_slowdown = {0.3};
  BOOST_TEST(eight.rate(2, 0) == 1.0 / 1.1, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_SUITE_END()
