// format_grid: the step x stage picture of a schedule, drawn from a simulation with equal op times.
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>

#include "pipeline/simulator.h"

namespace pw::pipeline {

namespace {

// F = 1 and B = 2 (Bi = 1 + W = 1): every op a whole number of columns, B twice F as is typical.
constexpr double kForwardUnits = 1.0, kBackwardInputUnits = 1.0, kBackwardWeightUnits = 1.0;

// A receive's span is time spent waiting: the grid shows it as idle.
bool is_compute(OpType op) {
  return op != OpType::RecvActivation && op != OpType::RecvGradient && op != OpType::SendActivation &&
         op != OpType::SendGradient;
}

void write_row(std::ostringstream& out, const std::string& label, std::size_t label_width,
               const std::vector<std::string>& cells, std::size_t cell_width) {
  std::ostringstream row;
  row << std::left << std::setw(static_cast<int>(label_width)) << label;
  for (const std::string& cell : cells) row << ' ' << std::setw(static_cast<int>(cell_width)) << cell;
  std::string text = row.str();
  text.erase(text.find_last_not_of(' ') + 1);
  out << text << '\n';
}

}  // namespace

std::string format_grid(const ScheduleSpec& spec) {
  const SimulationResult sim =
      simulate(spec, OpTimes::uniform(spec, kForwardUnits, kBackwardInputUnits, kBackwardWeightUnits));
  const auto columns = static_cast<std::size_t>(std::lround(sim.makespan));

  std::vector<std::vector<std::string>> cells(static_cast<std::size_t>(spec.stages),
                                              std::vector<std::string>(columns, "."));
  std::size_t width = std::to_string(columns).size();
  for (std::size_t s = 0; s < cells.size(); ++s) {
    const auto& timeline = sim.timeline[s];
    for (std::size_t i = 0; i < timeline.size(); ++i) {
      const TimedOp& op = timeline[i];
      if (!is_compute(op.instruction.op)) continue;
      std::string label = instruction_text(op.instruction, spec.chunks);
      // An overlapped pair fills its columns as one cell "F3.0&B1.1"; its backward is drawn with it.
      if (op.instruction.overlap == Overlap::WithNext && i + 1 < timeline.size())
        label += instruction_text(timeline[++i].instruction, spec.chunks);
      for (auto t = static_cast<std::size_t>(std::lround(op.start)); t < static_cast<std::size_t>(std::lround(op.end));
           ++t) {
        cells[s][t] = label;
        width = std::max(width, label.size());
      }
    }
  }

  const std::size_t label_width = ("stage " + std::to_string(spec.stages - 1)).size();
  std::vector<std::string> times;
  for (std::size_t t = 0; t < columns; ++t) times.push_back(std::to_string(t));
  std::ostringstream out;
  out << schedule_kind_name(spec.kind) << ": " << spec.stages << " stages, " << spec.micro_batches
      << " micro-batches";
  if (spec.chunks > 1) out << ", " << spec.chunks << " chunks per stage (cells <op><micro-batch>.<chunk>)";
  out << "; one column per time unit, F = 1, B = 2 (Bi = 1 + W = 1)\n";
  write_row(out, "time", label_width, times, width);
  for (std::size_t s = 0; s < cells.size(); ++s) write_row(out, "stage " + std::to_string(s), label_width, cells[s], width);
  out << "makespan " << sim.makespan << ", bubble " << std::fixed << std::setprecision(1)
      << 100.0 * sim.bubble_fraction << "%\n";
  return out.str();
}

}  // namespace pw::pipeline
