// Hostile files and values given to `pipewright train` (issue 49): each ends in one printable line
// with the status its kind of outcome has (2 bad input, 1 out of memory, 6 did not train), never a
// crash, a hang or "internal error".
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "tests/tools/cli_runner.h"

using pw::test::run_command;
using pw::test::run_pipewright;
using pw::test::ScratchDir;

namespace {

// A small job without its model, then with it.
const std::string kNoModel = "train --dataset synthetic --synthetic-size 64 --batch-size 8 --threads 1 --eval-batches 1 ";
const std::string kSmall = kNoModel + "--model seed-cnn ";

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<std::string> lines_of(const std::string& output) {
  std::vector<std::string> lines;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

// The run ended with `status` and a last line "pipewright: <kind>: ..." holding `expected`, with no
// internal error and no control character but the newlines between lines.
void check_outcome(const pw::test::CommandResult& r, int status, const std::string& kind, const std::string& expected) {
  BOOST_TEST(r.status == status, r.output);
  const auto lines = lines_of(r.output);
  BOOST_REQUIRE_MESSAGE(!lines.empty(), "no output");
  const auto& last = lines.back();
  BOOST_TEST(last.rfind("pipewright: " + kind + ": ", 0) == 0u, last);
  BOOST_TEST(last.find(expected) != std::string::npos, "expected '" << expected << "' in: " << last);
  BOOST_TEST(r.output.find("internal error") == std::string::npos, r.output);
  for (const char c : r.output) {
    const auto u = static_cast<unsigned char>(c);
    if (u != '\n' && (u < 0x20 || u == 0x7f)) {
      BOOST_ERROR("a raw control character " << static_cast<int>(u) << " in: " << r.output);
      break;
    }
  }
}

void check_input_error(const pw::test::CommandResult& r, const std::string& expected) {
  check_outcome(r, 2, "error", expected);
}

// A short job that checkpoints its 2 steps into `dir`; the checkpoint of step 2.
std::string make_checkpoint(const std::string& dir) {
  const auto r = run_pipewright(kSmall + "--steps 2 --checkpoint-dir " + dir + " --checkpoint-every 1");
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  return dir + "/step-0000002";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(hostile_config)

BOOST_AUTO_TEST_CASE(a_deeply_nested_config_is_refused_before_it_is_parsed) {
  ScratchDir dir("hostile_deep");
  const auto deep = dir.file("deep.json");
  write_text(deep, std::string(100000, '[') + std::string(100000, ']'));
  check_input_error(run_pipewright("train --config " + deep), "JSON nested deeper than 64 levels");
  BOOST_TEST(run_pipewright("train --config " + deep).output.find("--config " + deep) != std::string::npos);
  const auto objects = dir.file("objects.json");
  std::string text;
  for (int i = 0; i < 5000; ++i) text += "{\"a\":";
  write_text(objects, text + "1" + std::string(5000, '}'));
  check_input_error(run_pipewright("train --config " + objects), "nested deeper than 64");
  // Brackets inside strings (escaped quotes too) are text, not nesting: this config fails on its
  // model's name, not on its depth.
  const auto quoted = dir.file("quoted.json");
  write_text(quoted, R"({"model": {"name": "\"[[[[)" + std::string(1000, '[') + R"("}})");
  const auto q = run_pipewright("train --config " + quoted + " --print-config");
  BOOST_TEST(q.output.find("nested deeper") == std::string::npos, q.output);
  BOOST_TEST(q.output.find("internal error") == std::string::npos, q.output);
  // A list where a text belongs is named as a list, not dumped.
  const auto list = dir.file("list.json");
  write_text(list, R"({"model": {"name": [[1, 2], {"x": [3]}, "abc"]}})");
  check_input_error(run_pipewright("train --config " + list), "a list of 3 entries; expected a string");
}

BOOST_AUTO_TEST_CASE(a_deeply_nested_safetensors_header_is_refused) {
  ScratchDir dir("hostile_header");
  const auto file = dir.file("deep.safetensors");
  std::string header = std::string(50000, '[') + std::string(50000, ']');
  while (header.size() % 8 != 0) header += ' ';
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((static_cast<std::uint64_t>(header.size()) >> (8 * i)) & 0xff);
  write_text(file, bytes + header);
  check_input_error(run_pipewright(kSmall + "--steps 1 --load " + file), "nested deeper than 64");
}

BOOST_AUTO_TEST_CASE(the_largest_step_count_trains_until_its_end_without_reserving_for_it) {
  // Every step is non-finite (injected) and there is no checkpoint: the job stops after its first
  // step as one that did not train, not with an internal error while reserving 2^63 steps.
  const auto r = run_command("env PW_INJECT_FAULT=nonfinite-grad@1:0 " + pw::test::pipewright_binary() + " " + kSmall +
                             "--steps 9223372036854775807 --max-bad-steps 1");
  check_outcome(r, 6, "did not train", "no checkpoint to roll back to");
  // Epochs times the batches of an epoch past 2^63 - 1.
  check_input_error(run_pipewright(kSmall + "--epochs 9223372036854775807"), "--epochs");
  check_input_error(run_pipewright(kSmall + "--epochs 9223372036854775807"), "more steps than can be counted");
}

BOOST_AUTO_TEST_CASE(a_manifest_with_numbers_out_of_range_is_refused_naming_the_field) {
  ScratchDir dir("hostile_manifest");
  const auto folder = make_checkpoint(dir.file("ckpt"));
  const auto manifest = folder + "/manifest.json";
  const auto original = read_text(manifest);
  const auto with = [&](const std::string& pointer, const nlohmann::json& value) {
    auto j = nlohmann::json::parse(original);
    j[nlohmann::json::json_pointer(pointer)] = value;
    write_text(manifest, j.dump(1));
  };
  const std::string resume = kSmall + "--steps 4 --resume " + folder;
  struct Case {
    std::string pointer;
    nlohmann::json value;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"/data/epoch", -3, "/data/epoch -3; expected 0 or more"},
      {"/data/batch_in_epoch", std::int64_t{1} << 40, "batch 1099511627776 of an epoch, is past this job's 8 batches"},
      {"/data/batch_in_epoch", 8, "batch 8 of an epoch, is past this job's 8 batches per epoch; expected 0 to 7"},
      {"/data/batch_in_epoch", -1, "/data/batch_in_epoch -1; expected 0 or more"},
      {"/data/epoch", 2.5, "/data/epoch is not a whole number"},
      {"/lr", -1, "/lr -1; expected a finite number above 0"},
      {"/lr", 0, "/lr 0; expected a finite number above 0"},
      {"/lr", "fast", "/lr is not a number"},
      {"/skipped_steps", 3, "/skipped_steps 3; expected at most the step, 2"},
      {"/skipped_steps", -1, "/skipped_steps -1"},
      {"/rollbacks", -2, "/rollbacks -2; expected 0 or more"},
      {"/step", std::uint64_t{18446744073709551615ull}, "/step is not a whole number of at most 2^63 - 1"},
      {"/files/0/bytes", -5, "has bytes -5; expected 0 or more"},
  };
  for (const auto& c : cases) {
    BOOST_TEST_CONTEXT(c.pointer << " = " << c.value.dump()) {
      with(c.pointer, c.value);
      const auto r = run_pipewright(resume);
      check_input_error(r, c.expected);
      if (c.pointer != "/data/batch_in_epoch" || c.value.get<std::int64_t>() < 0)
        BOOST_TEST(r.output.find(manifest) != std::string::npos, r.output);
    }
  }
  // Nested past the bound.
  write_text(manifest, std::string(100000, '[') + std::string(100000, ']'));
  check_input_error(run_pipewright(resume), "nested deeper than 64");
  // The untouched manifest still resumes.
  write_text(manifest, original);
  const auto r = run_pipewright(resume);
  BOOST_TEST(r.status == 0, r.output);
}

BOOST_AUTO_TEST_CASE(a_config_is_held_to_the_ranges_of_the_flags) {
  ScratchDir dir("hostile_ranges");
  struct Case {
    std::string json;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {R"({"timeouts": {"stage_seconds": 1e-320}})", "--stage-timeout: "},
      {R"({"timeouts": {"stage_seconds": 1e-320}})", "must be a number from 0.001 to 1000000"},
      {R"({"timeouts": {"stage_seconds": 2e6}})", "must be a number from 0.001 to 1000000"},
      {R"({"timeouts": {"heartbeat_seconds": 0.1}})", "--heartbeat-timeout: 0.1; must be a number from 0.5 to 1000000"},
      {R"({"timeouts": {"startup_seconds": 0.01}})", "--startup-timeout: 0.01; must be a number from 0.1 to 1000000"},
      {R"({"pipeline": {"stages": 5000}})", "--stages: 5000; must be a whole number from 1 to 4096"},
      {R"({"pipeline": {"micro_batches": 2097152}})", "--micro-batches: 2097152; must be a whole number from 1 to 1048576"},
      {R"({"pipeline": {"chunks": 65}})", "--chunks: 65; must be a whole number from 1 to 64"},
      {R"({"data": {"batch_size": 33554432}})", "--batch-size: 33554432; must be a whole number from 1 to 16777216"},
      {R"({"ps": {"admit_after": 256}})", "--ps-admit-after: 256; must be a whole number from 1 to 255"},
  };
  int i = 0;
  for (const auto& c : cases) {
    const auto file = dir.file("c" + std::to_string(i++) + ".json");
    write_text(file, c.json);
    BOOST_TEST_CONTEXT(c.json) { check_input_error(run_pipewright("train --config " + file + " --print-config"), c.expected); }
  }
  // The bounds themselves are accepted.
  const auto edges = dir.file("edges.json");
  write_text(edges, R"({"timeouts": {"stage_seconds": 0.001, "heartbeat_seconds": 1e6, "startup_seconds": 0.1},
                       "pipeline": {"stages": 0, "micro_batches": 0, "chunks": 0}})");
  const auto r = run_pipewright("train --config " + edges + " --print-config");
  BOOST_TEST(r.status == 0, r.output);
}

BOOST_AUTO_TEST_CASE(load_refuses_a_folder_and_a_fifo_without_blocking) {
  ScratchDir dir("hostile_load");
  check_input_error(run_pipewright(kSmall + "--steps 1 --load " + dir.path.string()), "is a folder");
  const auto fifo = dir.file("weights.fifo");
  BOOST_REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // `timeout` only keeps a regression from hanging the suite (it would show as status 124).
  check_input_error(run_command("timeout 300 " + pw::test::pipewright_binary() + " " + kSmall + "--steps 1 --load " + fifo),
                    "is a named pipe (FIFO)");
  check_input_error(run_command("timeout 300 " + pw::test::pipewright_binary() + " train --config " + fifo),
                    "is a named pipe (FIFO)");
  check_input_error(run_pipewright("train --config " + dir.path.string()), "is a folder");
}

BOOST_AUTO_TEST_CASE(load_refuses_weights_that_are_not_finite) {
  ScratchDir dir("hostile_nan");
  const auto weights = dir.file("w.safetensors");
  auto r = run_pipewright(kSmall + "--steps 2 --save " + weights);
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  // The first F32 tensor's first value becomes NaN, then +infinity.
  auto bytes = read_text(weights);
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  std::string name;
  std::uint64_t begin = 0;
  for (const auto& [key, entry] : header.items())
    if (key != "__metadata__" && entry["dtype"] == "F32" && entry["data_offsets"][1] > entry["data_offsets"][0]) {
      name = key;
      begin = entry["data_offsets"][0].get<std::uint64_t>();
      break;
    }
  BOOST_REQUIRE(!name.empty());
  for (const std::uint32_t bits : {0x7fc00000u, 0x7f800000u}) {
    std::memcpy(bytes.data() + 8 + n + begin, &bits, sizeof bits);
    write_text(weights, bytes);
    r = run_pipewright(kSmall + "--steps 2 --load " + weights);
    check_input_error(r, "tensor '" + name + "' holds non-finite values (NaN or infinity)");
    BOOST_TEST(r.output.find(weights) != std::string::npos, r.output);
  }
}

BOOST_AUTO_TEST_CASE(a_host_allocation_that_fails_is_out_of_memory) {
  // Under a 2 GiB address-space limit, a synthetic epoch order of 1.94 GiB passes the size checks
  // (it is below the limit) but cannot be allocated beside the program itself: std::bad_alloc,
  // status 1.
  const auto r = run_command("ulimit -v 2097152 && " + pw::test::pipewright_binary() + " " +
                             "train --model seed-cnn --dataset synthetic --synthetic-size 130000000 --batch-size 8 "
                             "--steps 2 --threads 1 --eval-batches 1");
  if (r.status == 2 && r.output.find("memory") != std::string::npos) {
    BOOST_TEST_MESSAGE("skipped: this host's memory is too small for the case (" << r.output << ")");
    return;
  }
  check_outcome(r, 1, "out of memory", "the host could not allocate");
}

BOOST_AUTO_TEST_CASE(error_lines_escape_control_characters_and_stay_short) {
  ScratchDir dir("hostile_lines");
  // A newline and a terminal escape sequence in a flag's value.
  auto r = run_command(pw::test::pipewright_binary() + " " + kNoModel + "--steps 1 --model \"$(printf 'evil\\nname\\033[31m')\"");
  check_input_error(r, "evil\\nname\\x1b[31m");
  BOOST_TEST(lines_of(r.output).size() == 1u, r.output);
  // A name of 1 MB in a config: one line of about 2000 bytes that still ends with what is accepted.
  const auto config = dir.file("long.json");
  write_text(config, R"({"model": {"name": ")" + std::string(1 << 20, 'x') + R"("}})");
  r = run_pipewright(kNoModel + "--steps 1 --config " + config);
  BOOST_TEST(r.status == 2, r.output.substr(0, 4000));
  const auto lines = lines_of(r.output);
  BOOST_REQUIRE(!lines.empty());
  BOOST_TEST(lines.back().size() < 2200u);
  BOOST_TEST(lines.back().find("more bytes)") != std::string::npos, lines.back());
}

BOOST_AUTO_TEST_CASE(a_failed_save_still_writes_the_summary) {
  ScratchDir dir("hostile_save");
  const auto check_save_failure = [&](const std::string& save, const std::string& summary) {
    const auto r = run_pipewright(kSmall + "--steps 2 --save " + save + " --summary " + summary);
    check_input_error(r, save);
    BOOST_REQUIRE_MESSAGE(std::filesystem::exists(summary), r.output);
    const auto j = nlohmann::json::parse(read_text(summary));
    BOOST_TEST(j.value("save_error", std::string()).find(save) != std::string::npos, j.dump());
    BOOST_TEST(j["steps"] == 2);
  };
  // Nothing can be created in /proc, not even by root.
  check_save_failure("/proc/pw-hostile-weights-" + std::to_string(::getpid()) + ".safetensors", dir.file("s1.json"));
  if (::geteuid() != 0) {   // root writes into folders whatever their mode
    const auto locked = dir.file("locked");
    std::filesystem::create_directories(locked);
    ::chmod(locked.c_str(), 0500);
    check_save_failure(locked + "/w.safetensors", dir.file("s2.json"));
    ::chmod(locked.c_str(), 0700);
  }
}

BOOST_AUTO_TEST_SUITE_END()
