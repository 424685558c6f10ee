#include "pipeline/program_check.h"

#include <algorithm>
#include <array>
#include <map>
#include <string>

#include "core/error.h"

namespace pw::pipeline {
namespace {

constexpr std::size_t kOpCount = static_cast<std::size_t>(OpType::OptimizerStep) + 1;

// Where each op of one (micro-batch, chunk), or of the whole program, first appears (-1: never).
using FirstSeen = std::array<long, kOpCount>;

long& at(FirstSeen& seen, OpType op) { return seen[static_cast<std::size_t>(op)]; }

class ProgramCheck {
 public:
  ProgramCheck(const ScheduleSpec& spec, int stage, const std::vector<Instruction>& program)
      : spec_(spec), stage_(stage), program_(program), last_virtual_(spec.stages * spec.chunks - 1) {
    global_.fill(-1);
  }

  void run() {
    for (std::size_t i = 0; i < program_.size(); ++i) record(i, program_[i]);
    check_ending();
    for (int m = 0; m < spec_.micro_batches; ++m)
      for (int c = 0; c < spec_.chunks; ++c) check_unit_complete(m, c);
  }

 private:
  // An out-of-range chunk is shown too ("F1.1" when there is one chunk).
  std::string text(const Instruction& in) const {
    return "'" + instruction_text(in, std::max(spec_.chunks, in.chunk + 1)) + "'";
  }

  [[noreturn]] void fail_at(std::size_t i, const std::string& why) const {
    throw InputError(PW_DETAIL_MSG("stage " << stage_ << " instruction " << i << " " << text(program_[i]) << ": "
                                            << why));
  }
  [[noreturn]] void fail_missing(const Instruction& missing, const std::string& why) const {
    throw InputError(PW_DETAIL_MSG("stage " << stage_ << ": " << text(missing) << " is missing; " << why));
  }

  FirstSeen& unit(int micro_batch, int chunk) {
    auto [it, inserted] = units_.try_emplace({micro_batch, chunk});
    if (inserted) it->second.fill(-1);
    return it->second;
  }

  void record(std::size_t i, const Instruction& in) {
    const bool per_unit = in.op != OpType::ReduceGrads && in.op != OpType::OptimizerStep;
    if (per_unit) check_range(i, in);
    FirstSeen& seen = per_unit ? unit(in.micro_batch, in.chunk) : global_;
    if (at(seen, in.op) >= 0) fail_at(i, PW_DETAIL_MSG("second " << text(in) << " (the first is instruction "
                                                                  << at(seen, in.op) << ")"));
    at(seen, in.op) = static_cast<long>(i);
    if (per_unit) check_place(i, in);
    check_overlap(i, in);
  }

  // An overlapped F&B pair is a forward marked & and the backward of another unit right after it.
  void check_overlap(std::size_t i, const Instruction& in) const {
    if (in.overlap != Overlap::WithNext) return;
    if (in.op != OpType::Forward) fail_at(i, "only a forward can be overlapped (&) with the backward after it");
    const bool partner = i + 1 < program_.size() && (program_[i + 1].op == OpType::Backward ||
                                                     program_[i + 1].op == OpType::BackwardInput);
    if (!partner) fail_at(i, "an overlapped forward (&) must be followed right away by a backward (B or Bi)");
    if (program_[i + 1].micro_batch == in.micro_batch && program_[i + 1].chunk == in.chunk)
      fail_at(i, "an overlapped forward (&) pairs with the backward of another micro-batch or chunk, not its own");
  }

  void check_range(std::size_t i, const Instruction& in) const {
    if (in.micro_batch < 0 || in.micro_batch >= spec_.micro_batches)
      fail_at(i, PW_DETAIL_MSG("micro-batch " << in.micro_batch << " is out of range; the pipeline runs "
                                              << spec_.micro_batches << " (0.." << spec_.micro_batches - 1 << ")"));
    if (in.chunk < 0 || in.chunk >= spec_.chunks)
      fail_at(i, PW_DETAIL_MSG("chunk " << in.chunk << " is out of range; each stage holds " << spec_.chunks
                                        << " (0.." << spec_.chunks - 1 << ")"));
  }

  // Communication this virtual stage has no neighbour for.
  void check_place(std::size_t i, const Instruction& in) const {
    const int v = virtual_stage(spec_, stage_, in.chunk);
    const bool first = v == 0, last = v == last_virtual_;
    if (first && (in.op == OpType::RecvActivation || in.op == OpType::SendGradient))
      fail_at(i, PW_DETAIL_MSG("virtual stage " << v << " is the first: it reads the inputs and has no previous "
                                                   "stage to receive activations from or send gradients to"));
    if (last && (in.op == OpType::SendActivation || in.op == OpType::RecvGradient))
      fail_at(i, PW_DETAIL_MSG("virtual stage " << v << " is the last: it computes the loss and has no next "
                                                   "stage to send activations to or receive gradients from"));
  }

  void check_ending() const {
    if (program_.empty()) throw InputError(PW_DETAIL_MSG("stage " << stage_ << ": the program is empty"));
    const long rg = global_[static_cast<std::size_t>(OpType::ReduceGrads)];
    const long step = global_[static_cast<std::size_t>(OpType::OptimizerStep)];
    const std::string ending = "a program ends with 'RG S'";
    if (rg < 0) fail_missing({OpType::ReduceGrads}, ending);
    if (step < 0) fail_missing({OpType::OptimizerStep}, ending);
    const auto last = static_cast<long>(program_.size()) - 1;
    if (step != last) fail_at(static_cast<std::size_t>(step), ending + "; this S has instructions after it");
    if (rg != last - 1) fail_at(static_cast<std::size_t>(rg), ending + "; this RG is not right before S");
  }

  void check_unit_complete(int m, int c) {
    FirstSeen& seen = unit(m, c);
    const int v = virtual_stage(spec_, stage_, c);
    auto expect = [&](OpType op, bool needed, const std::string& why) {
      if (needed && at(seen, op) < 0) fail_missing({op, m, c}, why);
    };
    auto stage_of = [&](int piece) {
      return piece < 0 || piece > last_virtual_ ? std::string("none") : std::to_string(locate_virtual_stage(spec_, piece).stage);
    };
    expect(OpType::Forward, true, "every micro-batch runs one forward on each chunk");
    expect(OpType::RecvActivation, v > 0, "stage " + stage_of(v - 1) + " sends that activation");
    expect(OpType::SendActivation, v < last_virtual_, "stage " + stage_of(v + 1) + " receives that activation");
    expect(OpType::RecvGradient, v < last_virtual_, "stage " + stage_of(v + 1) + " sends that gradient");
    expect(OpType::SendGradient, v > 0, "stage " + stage_of(v - 1) + " receives that gradient");
    const long b = at(seen, OpType::Backward), bi = at(seen, OpType::BackwardInput);
    const long w = at(seen, OpType::BackwardWeight);
    if (b >= 0 && (bi >= 0 || w >= 0))
      fail_at(static_cast<std::size_t>(std::max({b, bi, w})),
              "a second backward of the same micro-batch and chunk; write either B, or Bi and W");
    expect(OpType::Backward, bi < 0 && w < 0, "every micro-batch runs one backward on each chunk (B, or Bi and W)");
    expect(OpType::BackwardWeight, bi >= 0, "the weight half of the split backward " +
                                                text({OpType::BackwardInput, m, c}) + " must run too");
    expect(OpType::BackwardInput, w >= 0, "the weight half " + text({OpType::BackwardWeight, m, c}) +
                                              " needs the input half before it");
  }

  const ScheduleSpec& spec_;
  const int stage_;
  const std::vector<Instruction>& program_;
  const int last_virtual_;
  FirstSeen global_;                               // RG and S
  std::map<std::pair<int, int>, FirstSeen> units_;   // (micro_batch, chunk)
};

}  // namespace

void check_stage_program(const ScheduleSpec& spec, int stage, const std::vector<Instruction>& program) {
  validate(spec);
  PW_INPUT_CHECK(stage >= 0 && stage < spec.stages,
                 "stage " << stage << " is outside the pipeline's stages 0.." << spec.stages - 1);
  ProgramCheck(spec, stage, program).run();
}

}  // namespace pw::pipeline
