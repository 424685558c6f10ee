// Durable files: whole or absent, a failed write keeps the old file; checksums see every byte.
#include <boost/test/unit_test.hpp>
#include <fcntl.h>
#include <unistd.h>

#include <functional>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/durable_file.h"
#include "core/error.h"

namespace fs = std::filesystem;

namespace {
std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}
fs::path fresh_dir(const char* name) {
  auto d = fs::temp_directory_path() / (std::string(name) + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}
}  // namespace

BOOST_AUTO_TEST_CASE(writes_replace_the_file_whole) {
  const auto dir = fresh_dir("pw-durable");
  const auto file = (dir / "a.json").string();
  pw::write_file_durably(file, "first");
  pw::write_file_durably(file, "second version");
  BOOST_TEST(read(file) == "second version");
  BOOST_TEST(!fs::exists(file + ".tmp"));
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(a_failed_write_keeps_the_old_file_and_names_it) {
  const auto dir = fresh_dir("pw-durable-fail");
  const auto file = (dir / "keep.bin").string();
  pw::write_file_durably(file, "good");
  try {
    pw::write_file_durably(file, [](const pw::WriteBytes& write) {
      write("partial", 7);
      throw std::runtime_error("No space left on device");
    });
    BOOST_FAIL("expected an error");
  } catch (const pw::InputError& e) {
    BOOST_TEST(std::string(e.what()).find("keep.bin") != std::string::npos);
    BOOST_TEST(std::string(e.what()).find("No space left") != std::string::npos);
  }
  BOOST_TEST(read(file) == "good");
  BOOST_TEST(!fs::exists(file + ".tmp"));
  // A fill that finds its own input bad (an InputError) leaves no temporary file either.
  BOOST_CHECK_THROW(pw::write_file_durably(file, [](const pw::WriteBytes& write) {
                      write("half", 4);
                      throw pw::InputError("the source image is unreadable");
                    }),
                    pw::InputError);
  BOOST_TEST(read(file) == "good");
  BOOST_TEST(!fs::exists(file + ".tmp"));
  BOOST_CHECK_THROW(pw::write_file_durably((dir / "no" / "such" / "folder.txt").string(), "x"), pw::InputError);
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(checksum_sees_every_byte) {
  std::vector<unsigned char> bytes(1000);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i * 7);
  const auto sum = pw::checksum64(bytes.data(), bytes.size());
  BOOST_TEST(sum == pw::checksum64(bytes.data(), bytes.size()));
  for (std::size_t i : {0u, 31u, 32u, 500u, 999u}) {
    auto changed = bytes;
    changed[i] ^= 1;
    BOOST_TEST(pw::checksum64(changed.data(), changed.size()) != sum);
  }
  BOOST_TEST(pw::checksum64(bytes.data(), 999) != sum);
  BOOST_TEST(pw::checksum_hex(0x1234).size() == 16u);
  // Fed in pieces of any size, the same sum.
  for (std::size_t piece : {1u, 7u, 32u, 33u, 400u}) {
    pw::Checksum64 streamed;
    for (std::size_t at = 0; at < bytes.size(); at += piece)
      streamed.add(bytes.data() + at, std::min(piece, bytes.size() - at));
    BOOST_TEST(streamed.value() == sum);
  }
}

// A link planted where a job writes is refused naming it, never followed; the target is kept.
BOOST_AUTO_TEST_CASE(links_planted_where_a_job_writes_are_refused) {
  const auto dir = fresh_dir("pw-durable-links");
  const auto victim = (dir / "victim").string();
  pw::write_file_durably(victim, "precious");
  const auto refused = [](const std::function<void()>& write, const std::string& named) {
    try {
      write();
      BOOST_FAIL("expected a refusal naming " << named);
    } catch (const pw::InputError& e) {
      BOOST_TEST(std::string(e.what()).find(named) != std::string::npos, e.what());
      BOOST_TEST(std::string(e.what()).find("symbolic link") != std::string::npos, e.what());
    }
  };
  // The file itself, and its temporary name.
  fs::create_symlink(victim, dir / "out.json");
  refused([&] { pw::write_file_durably((dir / "out.json").string(), "x"); }, "out.json");
  fs::create_symlink(victim, dir / "other.json.tmp");
  refused([&] { pw::write_file_durably((dir / "other.json").string(), "x"); }, "other.json.tmp");
  BOOST_TEST(fs::is_symlink(dir / "other.json.tmp"));
  BOOST_TEST(!fs::exists(dir / "other.json"));
  // A folder the job makes, planted as a link to a folder (with or without a trailing slash).
  fs::create_directories(dir / "elsewhere");
  fs::create_directory_symlink(dir / "elsewhere", dir / "step-1");
  refused([&] { pw::make_own_folder((dir / "step-1").string(), "checkpoint folder"); }, "step-1");
  refused([&] { pw::make_own_folder((dir / "step-1").string() + "/", "checkpoint folder"); }, "step-1");
  BOOST_TEST(fs::is_empty(dir / "elsewhere"));
  // A new file: a link (dangling or not) is refused; a plain leftover is replaced or refused.
  fs::create_symlink(dir / "nowhere", dir / "dangling");
  refused([&] { pw::create_new_file((dir / "dangling").string(), O_WRONLY, "event file"); }, "dangling");
  BOOST_TEST(!fs::exists(dir / "nowhere"));
  pw::write_file_durably((dir / "leftover").string(), "old");
  ::close(pw::create_new_file((dir / "leftover").string(), O_WRONLY, "temporary file", pw::Leftover::Replace));
  BOOST_TEST(fs::file_size(dir / "leftover") == 0u);
  BOOST_CHECK_THROW(pw::create_new_file((dir / "leftover").string(), O_WRONLY, "event file", pw::Leftover::Refuse),
                    pw::InputError);
  // A real folder planted by another user, or one others may write into, is refused too.
  fs::create_directories(dir / "open");
  fs::permissions(dir / "open", fs::perms::others_write, fs::perm_options::add);
  BOOST_CHECK_THROW(pw::make_own_folder((dir / "open").string(), "checkpoint folder"), pw::InputError);
  if (::geteuid() == 0) {
    fs::create_directories(dir / "theirs");
    BOOST_REQUIRE(::chown((dir / "theirs").c_str(), 65534, 65534) == 0);
    try {
      pw::make_own_folder((dir / "theirs").string(), "checkpoint folder");
      BOOST_FAIL("a folder of another user was taken");
    } catch (const pw::InputError& e) {
      BOOST_TEST(std::string(e.what()).find("owned by another user") != std::string::npos, e.what());
    }
  } else {
    BOOST_TEST_MESSAGE("skipped: a folder of another user needs root to make");
  }
  // Folders that exist for real, and missing parents, are fine.
  BOOST_TEST(pw::make_own_folder((dir / "a" / "b").string(), "folder"));
  BOOST_TEST(!pw::make_own_folder((dir / "a" / "b").string(), "folder"));
  BOOST_TEST(read(victim) == "precious");
  fs::remove_all(dir);
}
