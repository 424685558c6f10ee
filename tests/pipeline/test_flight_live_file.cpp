// A flight recorder mirrored into its live file: what is read back is what the recorder holds
// (across the ring's wrap, finished and running entries), an entry a kill cut is left out, and a
// damaged or foreign file is one InputError naming it.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <boost/test/unit_test.hpp>

#include "core/error.h"
#include "pipeline/flight_live_file.h"
#include "tests/tools/cli_runner.h"

using namespace pw;
using namespace pw::pipeline;

namespace {

const FlightLiveIdentity kIdentity{1, 1, 0, 2, 1, 1, "rA0 F0 sA0 rG0 B0 sG0 RG S"};

void expect_same(const std::vector<FlightEntry>& read, const std::vector<FlightEntry>& held) {
  BOOST_REQUIRE_EQUAL(read.size(), held.size());
  for (std::size_t i = 0; i < read.size(); ++i) {
    BOOST_TEST(read[i].sequence == held[i].sequence);
    BOOST_TEST(read[i].step == held[i].step);
    BOOST_TEST((read[i].instruction == held[i].instruction));
    BOOST_TEST(read[i].index == held[i].index);
    BOOST_TEST(read[i].peer_stage == held[i].peer_stage);
    BOOST_TEST(read[i].message_virtual_stage == held[i].message_virtual_stage);
    BOOST_TEST(read[i].bytes == held[i].bytes);
    BOOST_TEST(read[i].start_ns == held[i].start_ns);
    BOOST_TEST(read[i].end_ns == held[i].end_ns);
    BOOST_TEST((read[i].state == held[i].state));
  }
}

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::string input_error_of(const std::string& path) {
  try {
    read_flight_live_file(path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// Records `n` instructions of a stage program, every one finished but the last.
void record(FlightRecorder& recorder, int n) {
  const std::vector<Instruction> program = from_text("rA0 F0 sA0 rG0 B0 sG0");
  for (int i = 0; i < n; ++i) {
    const auto& in = program[static_cast<std::size_t>(i) % program.size()];
    const auto seq = recorder.start(i / 6, in, i % 6, in.op == OpType::Forward ? -1 : 0, 1);
    if (i + 1 < n) recorder.finish(seq, i % 5 == 4 ? FlightState::Failed : FlightState::Done, 100 * i);
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(flight_live_file)

BOOST_AUTO_TEST_CASE(the_file_holds_what_the_recorder_holds_across_the_ring_wrap) {
  pw::test::ScratchDir dir("flight-live");
  FlightRecorder recorder(8);
  record(recorder, 3);   // before the file: mirror_to writes what is held
  FlightLiveFile file(dir.file("flight-rank1.live"), kIdentity, recorder.capacity());
  recorder.mirror_to(&file);
  record(recorder, 17);   // wraps the ring of 8 twice
  const auto read = read_flight_live_file(file.path());
  expect_same(read.entries, recorder.snapshot());
  BOOST_TEST((read.entries.back().state == FlightState::Running));   // the last one never finished
  BOOST_TEST(read.identity.rank == 1);
  BOOST_TEST(read.identity.stages == 2);
  BOOST_TEST(read.identity.program == kIdentity.program);
  BOOST_TEST(read.pid == static_cast<std::int64_t>(::getpid()));
  BOOST_TEST(read.host == flight_host_name());
  BOOST_TEST(read.alive_ns >= read.entries.back().start_ns);
  // Touches move the clock on; a touch from the past does not move it back.
  file.touch(read.alive_ns + 5'000'000'000);
  file.touch(read.alive_ns);
  BOOST_TEST(read_flight_live_file(file.path()).alive_ns == read.alive_ns + 5'000'000'000);
  // Detached: later entries stay in the recorder only.
  recorder.mirror_to(nullptr);
  record(recorder, 2);
  BOOST_TEST(read_flight_live_file(file.path()).entries.back().sequence == read.entries.back().sequence);
  file.remove();
  BOOST_TEST(!std::filesystem::exists(file.path()));
}

BOOST_AUTO_TEST_CASE(an_entry_a_kill_cut_is_left_out_and_damage_is_named) {
  pw::test::ScratchDir dir("flight-live-damage");
  FlightRecorder recorder(4);
  const auto path = dir.file("flight-rank1.live");
  {
    FlightLiveFile file(path, kIdentity, recorder.capacity());
    recorder.mirror_to(&file);
    record(recorder, 6);
    recorder.mirror_to(nullptr);
  }
  const std::string whole = bytes_of(path);
  const auto entries = read_flight_live_file(path).entries;
  BOOST_REQUIRE_EQUAL(entries.size(), 4u);
  // Where the slots are, from the sizes of two files that differ only in capacity (searching the
  // bytes for a sequence number would also find it in a clock or an operation code): the header,
  // then `capacity` slots of one size, then the program. A slot starts with its sequence + 1 and
  // ends with its second copy.
  const std::size_t slot_bytes = [&] {
    FlightLiveFile five(dir.file("five.live"), kIdentity, 5);
    return bytes_of(five.path()).size() - whole.size();
  }();
  const std::size_t header_bytes = whole.size() - 4 * slot_bytes - kIdentity.program.size();
  const std::uint64_t newest = entries.back().sequence + 1;
  const std::size_t at = header_bytes + (entries.back().sequence % 4) * slot_bytes;
  const std::size_t check_at = at + slot_bytes - sizeof newest;
  std::uint64_t stored = 0, check = 0;
  std::memcpy(&stored, whole.data() + at, sizeof stored);
  std::memcpy(&check, whole.data() + check_at, sizeof check);
  BOOST_REQUIRE(stored == newest);
  BOOST_REQUIRE(check == newest);
  // Its sequence cleared, as a kill between the slot's two writes leaves it.
  std::string cut = whole;
  std::memset(cut.data() + at, 0, sizeof newest);
  write_bytes(path, cut);
  const auto left = read_flight_live_file(path).entries;
  BOOST_REQUIRE_EQUAL(left.size(), 3u);
  BOOST_TEST(left.back().sequence == entries[2].sequence);

  // Its second copy (written last) changed: a slot whose two copies differ was being written as
  // the file was read, and is left out too.
  std::string torn = whole;
  torn[check_at] ^= 1;
  write_bytes(path, torn);
  BOOST_TEST(read_flight_live_file(path).entries.size() == 3u);

  // A slot holding a sequence that is not its own (both copies agree on it).
  std::string moved = whole;
  const std::uint64_t foreign = newest + 1;   // the next slot's sequence
  std::memcpy(moved.data() + at, &foreign, sizeof foreign);
  std::memcpy(moved.data() + check_at, &foreign, sizeof foreign);
  write_bytes(path, moved);
  BOOST_TEST(input_error_of(path).find(path + ": entry ") == 0u, input_error_of(path));
  BOOST_TEST(input_error_of(path).find("is damaged") != std::string::npos);

  write_bytes(path, whole.substr(0, whole.size() - 3));
  BOOST_TEST(input_error_of(path).find("its header says") != std::string::npos, input_error_of(path));
  write_bytes(path, whole.substr(0, 20));
  BOOST_TEST(input_error_of(path).find("shorter than its header") != std::string::npos, input_error_of(path));
  write_bytes(path, "{\"format\": \"pipewright flight record 1\"}" + std::string(400, ' '));
  BOOST_TEST(input_error_of(path).find("no 'pwflight-live-1' header") != std::string::npos, input_error_of(path));
  BOOST_TEST(input_error_of(path).find('\n') == std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_file_that_cannot_be_made_is_an_error_naming_it) {
  pw::test::ScratchDir dir("flight-live-bad");
  const auto path = (dir.path / "missing-folder" / "flight-rank0.live").string();
  try {
    FlightLiveFile file(path, kIdentity, 4);
    BOOST_FAIL("made a file in a folder that does not exist");
  } catch (const Error& e) {
    BOOST_TEST(std::string(e.what()).find("cannot create live flight record '" + path) != std::string::npos, e.what());
    BOOST_TEST(std::string(e.what()).find("No such file or directory") != std::string::npos, e.what());
  }
}

BOOST_AUTO_TEST_SUITE_END()
