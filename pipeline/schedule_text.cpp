// The compact text form of instruction lists ("F0 sA0 rG0 B0 ... RG S") and its parser.
#include <algorithm>
#include <array>
#include <charconv>
#include <sstream>
#include <string_view>

#include "core/error.h"
#include "pipeline/schedule.h"

namespace pw::pipeline {

namespace {

struct Token {
  OpType op;
  std::string_view prefix;
  bool has_micro_batch;
};

// Longer prefixes first so that "Bi" is not read as "B" and "RG" not as "R".
constexpr std::array<Token, 11> kTokens = {{
    {OpType::BackwardInput, "Bi", true},
    {OpType::RecvActivation, "rA", true},
    {OpType::SendActivation, "sA", true},
    {OpType::RecvGradient, "rG", true},
    {OpType::SendGradient, "sG", true},
    {OpType::ReduceGrads, "RG", false},
    {OpType::Forward, "F", true},
    {OpType::Backward, "B", true},
    {OpType::BackwardWeight, "W", true},
    {OpType::Recompute, "R", true},
    {OpType::OptimizerStep, "S", false},
}};

const Token& token_of(OpType op) {
  for (const Token& t : kTokens)
    if (t.op == op) return t;
  PW_FAIL("no text token for OpType " << static_cast<int>(op));
}

// "F3.1&": this forward and the backward after it are one overlapped F&B unit.
constexpr char kOverlapMark = '&';

bool is_communication(OpType op) {
  return op == OpType::RecvActivation || op == OpType::SendActivation || op == OpType::RecvGradient ||
         op == OpType::SendGradient;
}

// Parses the whole of `text` as a non-negative number; false if it is empty or has other characters.
bool parse_index(std::string_view text, int& out) {
  if (text.empty()) return false;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), out);
  return error == std::errc() && end == text.data() + text.size() && out >= 0;
}

void write_token(std::ostream& out, const Instruction& in, bool with_chunk) {
  const Token& t = token_of(in.op);
  out << t.prefix;
  if (!t.has_micro_batch) return;
  out << in.micro_batch;
  if (with_chunk) out << '.' << in.chunk;
  if (in.overlap == Overlap::WithNext) out << kOverlapMark;
}

Instruction parse_token(std::string_view word, int position) {
  if (word.size() > 1 && word.back() == kOverlapMark) {
    Instruction in = parse_token(word.substr(0, word.size() - 1), position);
    PW_INPUT_CHECK(in.op == OpType::Forward, "schedule text: token " << position << " '" << word
                                                                     << "': only a forward F<mb>& overlaps the "
                                                                        "backward after it");
    in.overlap = Overlap::WithNext;
    return in;
  }
  for (const Token& t : kTokens) {
    if (!word.starts_with(t.prefix)) continue;
    std::string_view rest = word.substr(t.prefix.size());
    if (!t.has_micro_batch) {
      if (!rest.empty()) continue;   // e.g. "RG3" is not ReduceGrads
      return {t.op};
    }
    Instruction in{t.op};
    const auto dot = rest.find('.');
    const bool ok = parse_index(rest.substr(0, dot), in.micro_batch) &&
                    (dot == std::string_view::npos || parse_index(rest.substr(dot + 1), in.chunk));
    if (ok) return in;
  }
  PW_INPUT_CHECK(false, "schedule text: token " << position << " '" << word
                                                << "' is not an instruction; accepted: F<mb>, B<mb>, Bi<mb>, W<mb>, "
                                                   "rA<mb>, sA<mb>, rG<mb>, sG<mb>, R<mb> (each optionally .<chunk>), "
                                                   "F<mb>& (overlapped with the next backward), RG, S");
  return {};
}

}  // namespace

std::string op_name(OpType op) {
  switch (op) {
    case OpType::Forward: return "Forward";
    case OpType::Backward: return "Backward";
    case OpType::BackwardInput: return "BackwardInput";
    case OpType::BackwardWeight: return "BackwardWeight";
    case OpType::RecvActivation: return "RecvActivation";
    case OpType::SendActivation: return "SendActivation";
    case OpType::RecvGradient: return "RecvGradient";
    case OpType::SendGradient: return "SendGradient";
    case OpType::Recompute: return "Recompute";
    case OpType::ReduceGrads: return "ReduceGrads";
    case OpType::OptimizerStep: return "OptimizerStep";
  }
  PW_FAIL("unknown OpType " << static_cast<int>(op));
}

std::string to_text(const std::vector<Instruction>& program, bool with_communication) {
  const bool with_chunks =
      std::any_of(program.begin(), program.end(), [](const Instruction& in) { return in.chunk != 0; });
  std::ostringstream out;
  bool first = true;
  for (const Instruction& in : program) {
    if (!with_communication && is_communication(in.op)) continue;
    if (!first) out << ' ';
    first = false;
    write_token(out, in, with_chunks);
  }
  return out.str();
}

std::string instruction_text(const Instruction& instruction, int chunks) {
  std::ostringstream out;
  write_token(out, instruction, chunks > 1);
  return out.str();
}

std::vector<Instruction> from_text(const std::string& text) {
  std::vector<Instruction> program;
  std::istringstream in(text);
  std::string word;
  while (in >> word) program.push_back(parse_token(word, static_cast<int>(program.size())));
  return program;
}

}  // namespace pw::pipeline
