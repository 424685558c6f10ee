// Checkpoint folders are owned and confined (train/checkpoint.cpp): the folder's lock is exclusive
// and names its holder, a stale one is taken over, manifest file names stay inside their folder,
// and pruning or a rollback removes only what the running job made.
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "core/durable_file.h"
#include "core/error.h"
#include "train/checkpoint.h"
#include "train/job_config.h"

using namespace pw;
using namespace pw::train;
namespace fs = std::filesystem;

namespace {

struct Scratch {
  fs::path path = fs::temp_directory_path() / ("pw_train_checkpoint_" + std::to_string(::getpid()));
  Scratch() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Scratch() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

std::string read(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

// A pid that belonged to a process of this host that has ended.
long long dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  return child;
}

// A complete checkpoint of `step` written by `run` into `dir`, with one tensor file.
void make_checkpoint(const std::string& dir, std::int64_t step, const std::string& run) {
  const auto folder = (fs::path(dir) / checkpoint_folder_name(step)).string();
  write(folder + "/layers-0000-0001.safetensors", "tensors");
  CheckpointManifest m;
  m.step = step;
  m.loss_history.assign(static_cast<std::size_t>(step), 1.0);
  m.config = nlohmann::json::object();
  m.run = run;
  m.files.push_back({"layers-0000-0001.safetensors", 7, file_checksum(folder + "/layers-0000-0001.safetensors"), {}});
  write_manifest(folder, m);
}

// The message read_manifest gives for FOLDER whose manifest lists `files` (and parameter-server
// files below `ps_folder`); empty when it is accepted.
std::string manifest_error(const std::string& folder, const std::vector<std::string>& files,
                           const std::string& ps_folder = "", const std::vector<std::string>& ps_files = {}) {
  CheckpointManifest m;
  m.config = nlohmann::json::object();
  for (const auto& name : files) m.files.push_back({name, 1, "0", {}});
  m.ps_folder = ps_folder;
  for (const auto& name : ps_files) m.ps_files.push_back({name, 1, "0", {}});
  fs::create_directories(folder);
  write_manifest(folder, m);
  try {
    read_manifest(folder);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

void check_refused(const std::string& message, const std::string& folder, const std::string& entry,
                   const std::string& why) {
  BOOST_TEST(message.find("'" + folder + "/manifest.json': file entry '" + entry + "' " + why) != std::string::npos,
             message);
  BOOST_TEST(message.find('\n') == std::string::npos, "not one line: " << message);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(checkpoint_folders)

BOOST_AUTO_TEST_CASE(the_lock_is_exclusive_names_its_holder_and_goes_with_it) {
  Scratch dir;
  const auto lock_file = dir.file(kLockName);
  {
    CheckpointDirLock first(dir.path.string(), "run-a");
    BOOST_TEST(!first.taken_over().has_value());
    const auto held = nlohmann::json::parse(read(lock_file));
    BOOST_TEST(held["pid"].get<long long>() == ::getpid());
    BOOST_TEST(held["host"].get<std::string>() == this_host_name());
    BOOST_TEST(held["run"].get<std::string>() == "run-a");
    BOOST_TEST(!held["started"].get<std::string>().empty());
    // flock: a second open of the same file conflicts even in the same process, as another job would.
    std::string message;
    try {
      CheckpointDirLock second(dir.path.string(), "run-b");
    } catch (const ConfigError& e) {
      message = e.what();
    }
    BOOST_TEST(message.find("is in use by another job (host " + this_host_name() + ", pid " +
                            std::to_string(::getpid())) != std::string::npos,
               message);
    BOOST_TEST(message.find('\n') == std::string::npos, message);
    // The holder's file is as it was.
    BOOST_TEST(nlohmann::json::parse(read(lock_file))["run"] == "run-a");
  }
  BOOST_TEST(!fs::exists(lock_file), "the lock file outlived its holder");
  CheckpointDirLock again(dir.path.string(), "run-b");
  BOOST_TEST(!again.taken_over().has_value());
}

BOOST_AUTO_TEST_CASE(a_stale_lock_of_a_dead_process_on_this_host_is_taken_over) {
  Scratch dir;
  const auto pid = dead_pid();
  write(dir.file(kLockName), nlohmann::json{{"host", this_host_name()}, {"pid", pid}, {"started", "then"}}.dump());
  {
    CheckpointDirLock lock(dir.path.string(), "run-new");
    BOOST_REQUIRE(lock.taken_over().has_value());
    BOOST_TEST(lock.taken_over()->pid == pid);
    BOOST_TEST(nlohmann::json::parse(read(dir.file(kLockName)))["pid"].get<long long>() == ::getpid());
  }
  // One left by another host cannot be checked from here: refused, saying what to remove.
  write(dir.file(kLockName), nlohmann::json{{"host", "another-host-" + this_host_name()}, {"pid", 7}}.dump());
  std::string message;
  try {
    CheckpointDirLock lock(dir.path.string(), "run-new");
  } catch (const ConfigError& e) {
    message = e.what();
  }
  BOOST_TEST(message.find("host another-host-" + this_host_name() + ", pid 7") != std::string::npos, message);
  BOOST_TEST(message.find("if that job has ended, remove " + dir.file(kLockName)) != std::string::npos, message);
  BOOST_TEST(fs::exists(dir.file(kLockName)));
}

BOOST_AUTO_TEST_CASE(manifest_file_names_are_plain_names_inside_their_folder) {
  Scratch dir;
  const auto folder = dir.file("ckpt/step-0000000");
  write(dir.file("other/x.safetensors"), "outside");
  check_refused(manifest_error(folder, {"../../other/x.safetensors"}), folder, "../../other/x.safetensors",
                "climbs out of its folder with '..'");
  check_refused(manifest_error(folder, {".."}), folder, "..", "climbs out of its folder with '..'");
  check_refused(manifest_error(folder, {dir.file("other/x.safetensors")}), folder, dir.file("other/x.safetensors"),
                "is an absolute path");
  check_refused(manifest_error(folder, {"sub/x.safetensors"}), folder, "sub/x.safetensors", "holds a path separator");
  check_refused(manifest_error(folder, {""}), folder, "", "is empty");
  check_refused(manifest_error(folder, {"a.safetensors", "b.safetensors", "a.safetensors"}), folder, "a.safetensors",
                "is listed twice");
  // Parameter-server files lie below their own folder, and nowhere else.
  BOOST_TEST(manifest_error(folder, {"a.safetensors"}, "ps", {"ps/shard-0/table.bin"}) == "");
  check_refused(manifest_error(folder, {"a.safetensors"}, "ps", {"ps/../../other/x.safetensors"}), folder,
                "ps/../../other/x.safetensors", "climbs out of its folder with '..'");
  check_refused(manifest_error(folder, {"a.safetensors"}, "ps", {"elsewhere/t.bin"}), folder, "elsewhere/t.bin",
                "is not inside the parameter-server folder 'ps'");
  check_refused(manifest_error(folder, {"a.safetensors"}, "ps", {"a.safetensors"}), folder, "a.safetensors",
                "is not inside the parameter-server folder 'ps'");
  BOOST_TEST(manifest_error(folder, {"a.safetensors"}, "../ps", {}).find("parameter-server folder '../ps'") !=
             std::string::npos);
  // A symbolic link is followed only while it stays inside the folder.
  fs::create_symlink(dir.file("other/x.safetensors"), folder + "/out.safetensors");
  check_refused(manifest_error(folder, {"out.safetensors"}), folder, "out.safetensors",
                "is a symbolic link (or lies below one) leading out of " + folder);
  write(folder + "/real.safetensors", "inside");
  fs::create_symlink("real.safetensors", folder + "/alias.safetensors");
  BOOST_TEST(manifest_error(folder, {"alias.safetensors"}) == "");
  fs::create_directory_symlink(dir.file("other"), folder + "/ps");
  check_refused(manifest_error(folder, {"a.safetensors"}, "ps", {"ps/x.safetensors"}), folder, "ps/x.safetensors",
                "is a symbolic link (or lies below one) leading out of " + folder);
}

BOOST_AUTO_TEST_CASE(pruning_and_rollbacks_remove_only_what_this_job_made) {
  Scratch dir;
  const auto ckpt = dir.file("ckpt");
  // Another run's checkpoints and an unfinished folder of it, there before the job took the lock.
  for (int step = 1; step <= 3; ++step) make_checkpoint(ckpt, step, "run-other");
  write(ckpt + "/step-0000009/layers-0000-0001.safetensors", "unfinished, another run's");
  // An earlier attempt of the same launch counts as this job (its manifests name the run).
  make_checkpoint(ckpt, 4, "run-mine");
  CheckpointOwnership mine{"run-mine", checkpoint_folder_names(ckpt)};
  BOOST_TEST(!mine.owns(ckpt + "/step-0000001"));
  BOOST_TEST(mine.owns(ckpt + "/step-0000004"));
  BOOST_TEST(!mine.owns(ckpt + "/step-0000009"));
  for (int step = 5; step <= 7; ++step) make_checkpoint(ckpt, step, "run-mine");
  write(ckpt + "/step-0000006x/x", "not a step folder");
  BOOST_TEST(mine.owns(ckpt + "/step-0000007"));   // made after the lock

  prune_checkpoints(ckpt, 2, mine);
  for (int step : {1, 2, 3, 6, 7}) BOOST_TEST(fs::exists(ckpt + "/" + checkpoint_folder_name(step) + "/manifest.json"), step);
  for (int step : {4, 5}) BOOST_TEST(!fs::exists(ckpt + "/" + checkpoint_folder_name(step)), step);
  BOOST_TEST(fs::exists(ckpt + "/step-0000009/layers-0000-0001.safetensors"));

  remove_checkpoints_after(ckpt, 2, mine);
  for (int step : {1, 2, 3}) BOOST_TEST(fs::exists(ckpt + "/" + checkpoint_folder_name(step) + "/manifest.json"), step);
  for (int step : {6, 7}) BOOST_TEST(!fs::exists(ckpt + "/" + checkpoint_folder_name(step)), step);
  BOOST_TEST(fs::exists(ckpt + "/step-0000009/layers-0000-0001.safetensors"));
  BOOST_TEST(fs::exists(ckpt + "/step-0000006x/x"));
}

BOOST_AUTO_TEST_SUITE_END()
