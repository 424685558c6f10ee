#include <boost/test/unit_test.hpp>
#include <iostream>
#include "pipeline/simulator.h"
#include "pipeline/program_check.h"
#include "pipeline/v_schedules.h"
using namespace pw::pipeline;
BOOST_AUTO_TEST_CASE(explore) {
  for (auto kind : {ScheduleKind::ZeroBubbleV, ScheduleKind::VHalf, ScheduleKind::VMin, ScheduleKind::DualPipeV})
    for (int p = 1; p <= 6; ++p)
      for (int m = p; m <= 4 * p + 2; ++m) {
        ScheduleSpec spec{kind, p, m, 2};
        try { validate(spec); } catch (...) { continue; }
        try {
          std::vector<std::vector<Instruction>> progs;
          int peak = 0;
          for (int s = 0; s < p; ++s) { progs.push_back(stage_schedule(spec, s)); check_stage_program(spec, s, progs.back());
            peak = std::max(peak, peak_in_flight(progs.back(), HeldUntil::WeightGradientDone)); }
          auto r = simulate(spec, progs, OpTimes::uniform(spec, 1, 1, 1));
          double span_idle = 0;
          for (auto& tl : r.timeline) { double busy = 0, first = 1e9, lastend = 0; for (auto& op : tl) if (op.end > op.start && (op.instruction.op == OpType::Forward || op.instruction.op == OpType::Backward || op.instruction.op == OpType::BackwardInput || op.instruction.op == OpType::BackwardWeight)) { busy += op.end - op.start; first = std::min(first, op.start); lastend = std::max(lastend, op.end);} span_idle = std::max(span_idle, lastend - first - busy); }
          std::cout << pw::enum_name(kind) << " P=" << p << " M=" << m << " makespan=" << r.makespan << " excess=" << r.makespan - 6 * m << " peak=" << peak << " spanidle=" << span_idle << "\n";
        } catch (const std::exception& e) { std::cout << pw::enum_name(kind) << " P=" << p << " M=" << m << " FAIL " << e.what() << "\n"; }
      }
}
