// Properties every generated schedule must have, over a grid of (kind, P, M, V): it runs to the
// end in the simulator, does each micro-batch's work exactly once per chunk, pairs every send with
// a receive, and holds no more activations than the kind promises.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <map>
#include <tuple>

#include "pipeline/simulator.h"

using namespace pw::pipeline;

namespace {

std::vector<ScheduleSpec> all_specs() {
  std::vector<ScheduleSpec> specs;
  for (int p = 1; p <= 4; ++p) {
    for (int m = p; m <= 8; ++m) {
      specs.push_back({ScheduleKind::GPipe, p, m, 1});
      specs.push_back({ScheduleKind::OneFOneB, p, m, 1});
      specs.push_back({ScheduleKind::ZeroBubbleH1, p, m, 1});
      if (m % p == 0)
        for (int v : {2, 3}) specs.push_back({ScheduleKind::Interleaved, p, m, v});
    }
  }
  return specs;
}

std::string describe(const ScheduleSpec& spec) {
  return schedule_kind_name(spec.kind) + " P=" + std::to_string(spec.stages) + " M=" +
         std::to_string(spec.micro_batches) + " V=" + std::to_string(spec.chunks);
}

int count(const std::vector<Instruction>& program, OpType op, int micro_batch, int chunk) {
  return static_cast<int>(std::count(program.begin(), program.end(), Instruction{op, micro_batch, chunk}));
}

// (is_activation, micro_batch, receiving virtual stage) -> number of sends minus receives.
using MessageBalance = std::map<std::tuple<bool, int, int>, int>;

}  // namespace

BOOST_AUTO_TEST_SUITE(schedule_properties)

BOOST_AUTO_TEST_CASE(every_schedule_simulates_without_deadlock) {
  for (const ScheduleSpec& spec : all_specs()) {
    BOOST_TEST_CONTEXT(describe(spec)) {
      BOOST_CHECK_NO_THROW(simulate(spec, OpTimes::uniform(spec, 1.0, 1.0, 1.0)));
      // Uneven times change the interleaving of events, not whether the schedule completes.
      OpTimes uneven = OpTimes::uniform(spec, 1.0, 1.5, 0.5);
      for (std::size_t v = 0; v < uneven.forward.size(); ++v) {
        uneven.forward[v] += 0.3 * static_cast<double>(v % 3);
        uneven.send_activation[v] = 0.1 * static_cast<double>(v + 1);
        uneven.send_gradient[v] = 0.2;
      }
      BOOST_CHECK_NO_THROW(simulate(spec, uneven));
    }
  }
}

BOOST_AUTO_TEST_CASE(every_micro_batch_runs_once_per_chunk) {
  for (const ScheduleSpec& spec : all_specs()) {
    const bool split = spec.kind == ScheduleKind::ZeroBubbleH1;
    for (int s = 0; s < spec.stages; ++s) {
      const auto program = stage_schedule(spec, s);
      BOOST_TEST_CONTEXT(describe(spec) << " stage " << s << ": " << to_text(program)) {
        for (int m = 0; m < spec.micro_batches; ++m) {
          for (int c = 0; c < spec.chunks; ++c) {
            BOOST_TEST(count(program, OpType::Forward, m, c) == 1);
            BOOST_TEST(count(program, OpType::Backward, m, c) == (split ? 0 : 1));
            BOOST_TEST(count(program, OpType::BackwardInput, m, c) == (split ? 1 : 0));
            BOOST_TEST(count(program, OpType::BackwardWeight, m, c) == (split ? 1 : 0));
          }
        }
        const std::size_t computes = static_cast<std::size_t>(spec.micro_batches * spec.chunks * (split ? 3 : 2));
        const auto n_compute = std::count_if(program.begin(), program.end(), [](const Instruction& in) {
          return in.op == OpType::Forward || in.op == OpType::Backward || in.op == OpType::BackwardInput ||
                 in.op == OpType::BackwardWeight;
        });
        BOOST_TEST(static_cast<std::size_t>(n_compute) == computes);
        BOOST_REQUIRE(program.size() >= 2);
        BOOST_TEST((program[program.size() - 2] == Instruction{OpType::ReduceGrads}));
        BOOST_TEST((program.back() == Instruction{OpType::OptimizerStep}));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(sends_and_receives_pair_up) {
  for (const ScheduleSpec& spec : all_specs()) {
    MessageBalance balance;
    const int last = spec.stages * spec.chunks - 1;
    for (int s = 0; s < spec.stages; ++s) {
      const auto program = stage_schedule(spec, s);
      for (std::size_t i = 0; i < program.size(); ++i) {
        const Instruction& in = program[i];
        if (in.op == OpType::ReduceGrads || in.op == OpType::OptimizerStep) continue;
        const int v = virtual_stage(spec, s, in.chunk);
        switch (in.op) {
          case OpType::SendActivation: ++balance[{true, in.micro_batch, v + 1}]; break;
          case OpType::RecvActivation: --balance[{true, in.micro_batch, v}]; break;
          case OpType::SendGradient: ++balance[{false, in.micro_batch, v - 1}]; break;
          case OpType::RecvGradient: --balance[{false, in.micro_batch, v}]; break;
          default: break;
        }
        // The contract's placement: receives right before, sends right after their compute op.
        const auto at = [&](std::size_t j) { return j < program.size() ? program[j].op : OpType::OptimizerStep; };
        const bool backward = in.op == OpType::Backward || in.op == OpType::BackwardInput;
        BOOST_TEST_CONTEXT(describe(spec) << " stage " << s << " instruction " << i) {
          if (in.op == OpType::Forward) {
            BOOST_TEST((v != 0) == (i > 0 && at(i - 1) == OpType::RecvActivation));
            BOOST_TEST((v != last) == (at(i + 1) == OpType::SendActivation));
          }
          if (backward) {
            BOOST_TEST((v != last) == (i > 0 && at(i - 1) == OpType::RecvGradient));
            BOOST_TEST((v != 0) == (at(i + 1) == OpType::SendGradient));
          }
        }
      }
    }
    for (const auto& [key, net] : balance) {
      BOOST_TEST(net == 0, describe(spec) << ": " << (std::get<0>(key) ? "activation" : "gradient")
                                          << " of micro-batch " << std::get<1>(key) << " to virtual stage "
                                          << std::get<2>(key) << " sent minus received = " << net);
    }
    const std::size_t messages_per_direction = static_cast<std::size_t>(spec.micro_batches * last);
    BOOST_TEST(balance.size() == 2 * messages_per_direction, describe(spec));
  }
}

// 1F1B's memory bound: stage s holds at most min(P - s, M) forwards whose backward has not started.
BOOST_AUTO_TEST_CASE(one_f_one_b_holds_at_most_p_minus_s_micro_batches) {
  for (const ScheduleSpec& spec : all_specs()) {
    if (spec.kind != ScheduleKind::OneFOneB) continue;
    for (int s = 0; s < spec.stages; ++s) {
      const auto program = stage_schedule(spec, s);
      const int bound = std::min(spec.stages - s, spec.micro_batches);
      BOOST_TEST(peak_in_flight(program, HeldUntil::BackwardStarts) == bound, describe(spec) << " stage " << s);
      BOOST_TEST(peak_in_flight(program, HeldUntil::WeightGradientDone) == bound, describe(spec) << " stage " << s);
    }
  }
}

BOOST_AUTO_TEST_CASE(gpipe_holds_every_micro_batch) {
  for (int p = 1; p <= 4; ++p) {
    for (int m = 1; m <= 8; ++m) {
      const ScheduleSpec spec{ScheduleKind::GPipe, p, m, 1};
      for (int s = 0; s < p; ++s)
        BOOST_TEST(peak_in_flight(stage_schedule(spec, s), HeldUntil::BackwardStarts) == m, describe(spec));
    }
  }
}

// ZB-H1 keeps 1F1B's backward order, and its delayed W's keep every stage at stage 0's 1F1B peak
// (P): the largest footprint of any stage is the same as in 1F1B.
BOOST_AUTO_TEST_CASE(zero_bubble_h1_holds_no_more_than_1f1b_peak) {
  for (const ScheduleSpec& spec : all_specs()) {
    if (spec.kind != ScheduleKind::ZeroBubbleH1) continue;
    for (int s = 0; s < spec.stages; ++s) {
      const auto program = stage_schedule(spec, s);
      BOOST_TEST(peak_in_flight(program, HeldUntil::BackwardStarts) == std::min(spec.stages - s, spec.micro_batches),
                 describe(spec) << " stage " << s);
      BOOST_TEST(peak_in_flight(program, HeldUntil::WeightGradientDone) == std::min(spec.stages, spec.micro_batches),
                 describe(spec) << " stage " << s);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
