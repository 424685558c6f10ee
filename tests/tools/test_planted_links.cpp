// Nothing is written through a link the job did not make: a symbolic link planted where a job
// writes (its checkpoint lock, a step folder, a temporary file, the summary, the trace, the debug
// folder's live record) is refused in one line naming it, and the link's target is untouched.
// The CLI end to end, as an attacker with write access to the job's folders would try it.
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>

#include "tests/tools/job_outputs.h"

using pw::test::CommandResult;
using pw::test::read_file;
using pw::test::run_pipewright;
using pw::test::ScratchDir;

namespace fs = std::filesystem;

namespace {

const std::string kJob =
    "train --model seed-cnn --dataset synthetic --synthetic-size 64 --batch-size 8 --steps 2 --threads 1 --eval-batches 1 ";

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// Status 2, one "pipewright: error:" line naming `planted` as a symbolic link, no internal error.
void check_refused(const CommandResult& r, const std::string& planted) {
  BOOST_TEST(r.status == 2, r.output);
  std::size_t lines = 0;
  std::string line;
  for (std::size_t at = r.output.find("pipewright: error: "); at != std::string::npos;
       at = r.output.find("pipewright: error: ", at + 1)) {
    ++lines;
    line = r.output.substr(at, r.output.find('\n', at) - at);
  }
  BOOST_TEST(lines == 1u, r.output);
  BOOST_TEST(line.find(planted) != std::string::npos, line);
  BOOST_TEST(line.find("symbolic link") != std::string::npos, line);
  BOOST_TEST(r.output.find("internal error") == std::string::npos, r.output);
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_lock_file_planted_as_a_link_is_refused_and_its_target_kept) {
  ScratchDir dir("planted_lock");
  const auto victim = dir.file("victim.txt");
  write_text(victim, "precious\n");
  fs::create_directories(dir.path / "ckpt");
  fs::create_symlink(victim, dir.path / "ckpt" / "pipewright.lock");
  const auto r = run_pipewright(kJob + "--checkpoint-dir " + dir.file("ckpt") + " --checkpoint-every 1");
  check_refused(r, "pipewright.lock");
  BOOST_TEST(read_file(victim) == "precious\n");
  BOOST_TEST(fs::is_symlink(dir.path / "ckpt" / "pipewright.lock"));
}

BOOST_AUTO_TEST_CASE(a_step_folder_planted_as_a_link_is_refused_and_nothing_lands_where_it_points) {
  ScratchDir dir("planted_step");
  fs::create_directories(dir.path / "ckpt");
  fs::create_directories(dir.path / "elsewhere");
  fs::create_directory_symlink(dir.path / "elsewhere", dir.path / "ckpt" / "step-0000002");
  const auto r = run_pipewright(kJob + "--checkpoint-dir " + dir.file("ckpt") + " --checkpoint-every 1");
  check_refused(r, "step-0000002");
  BOOST_TEST(fs::is_empty(dir.path / "elsewhere"));
  // The job's lock is gone with it: the folder can be used again once the link is removed.
  BOOST_TEST(!fs::exists(dir.path / "ckpt" / "pipewright.lock"));
}

BOOST_AUTO_TEST_CASE(a_summary_or_its_temporary_file_planted_as_a_link_is_refused) {
  ScratchDir dir("planted_summary");
  const auto victim = dir.file("victim.txt");
  write_text(victim, "precious\n");
  fs::create_symlink(victim, dir.path / "summary.json");
  check_refused(run_pipewright(kJob + "--summary " + dir.file("summary.json")), "summary.json");
  fs::remove(dir.path / "summary.json");
  fs::create_symlink(victim, dir.path / "summary.json.tmp");
  check_refused(run_pipewright(kJob + "--summary " + dir.file("summary.json")), "summary.json.tmp");
  BOOST_TEST(read_file(victim) == "precious\n");
  BOOST_TEST(!fs::exists(dir.path / "summary.json"));
}

BOOST_AUTO_TEST_CASE(a_trace_planted_as_a_link_is_refused) {
  ScratchDir dir("planted_trace");
  const auto victim = dir.file("victim.txt");
  write_text(victim, "precious\n");
  fs::create_symlink(victim, dir.path / "trace.json");
  check_refused(run_pipewright(kJob + "--trace " + dir.file("trace.json")), "trace.json");
  BOOST_TEST(read_file(victim) == "precious\n");
}

BOOST_AUTO_TEST_CASE(a_live_flight_record_planted_as_a_link_is_refused_before_training) {
  ScratchDir dir("planted_debug");
  const auto victim = dir.file("victim.txt");
  write_text(victim, "precious\n");
  fs::create_directories(dir.path / "debug");
  fs::create_symlink(victim, dir.path / "debug" / "flight-rank0.live");
  const auto r = run_pipewright(kJob + "--debug-dir " + dir.file("debug"));
  check_refused(r, "flight-rank0.live");
  BOOST_TEST(read_file(victim) == "precious\n");
}
