// pipewright as a user outside this tree gets it: `cmake --install` into a prefix, then a fresh
// CMake project (a copy of examples/) that does find_package(pipewright), builds against the
// installed headers and libpipewright.so only, and trains its own CNN embedded and under the
// installed `pipewright launch` with the same losses and weights (bitwise) as the in-tree build.
// And a parent project that pulls pipewright in with FetchContent (add_subdirectory underneath)
// configures and compiles against its include roots.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "tests/tools/cli_runner.h"
#include "tests/tools/job_outputs.h"

using pw::test::check_same;
using pw::test::read_json;
using pw::test::run_command;
using pw::test::ScratchDir;

namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

std::string build_dir() { return std::filesystem::path(env_or("PW_BIN_DIR", "build/bin")).parent_path().string(); }
std::string source_dir() { return env_or("PW_SOURCE_DIR", "."); }
std::string cmake() { return env_or("PW_CMAKE", "cmake"); }
std::string generator() {
  const auto g = env_or("PW_CMAKE_GENERATOR", "");
  return g.empty() ? "" : " -G '" + g + "'";
}

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

}  // namespace

BOOST_AUTO_TEST_SUITE(installed_package)

BOOST_AUTO_TEST_CASE(an_outside_project_finds_the_installed_package_and_trains_embedded_and_launched) {
  ScratchDir dir("installed");
  const std::string prefix = dir.file("prefix");
  auto r = run_command(cmake() + " --install " + build_dir() + " --prefix " + prefix);
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  for (const char* f : {"include/pipewright/pipewright.h", "include/pipewright/version.h",
                        "lib/cmake/pipewright/pipewrightConfig.cmake", "lib/cmake/pipewright/pipewrightConfigVersion.cmake",
                        "lib/libpipewright.so", "bin/pipewright"})
    BOOST_TEST(std::filesystem::exists(std::filesystem::path(prefix) / f), f);
  // The installed headers name no internal header (they could not be found there).
  r = run_command("grep -rlE '#include \"(core|kernels|models|partition|pipeline|rpc|dataparallel|train|tools)/' " +
                  prefix + "/include");
  BOOST_TEST(r.status == 1, "installed headers include internal ones: " << r.output);

  // A fresh project: examples/ copied out of the tree, configured against the prefix alone.
  const std::string project = dir.file("project");
  std::filesystem::copy(source_dir() + "/examples", project, std::filesystem::copy_options::recursive);
  r = run_command(cmake() + " -S " + project + " -B " + dir.file("project-build") + generator() +
                  " -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=" + prefix);
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  r = run_command(cmake() + " --build " + dir.file("project-build"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);

  const std::string program = dir.file("project-build") + "/example_custom_cnn";
  const std::string args = " --steps 6 --batch-size 32";
  r = run_command(program + args + " --summary " + dir.file("embedded.json") + " --save " + dir.file("embedded.safetensors"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  r = run_command(prefix + "/bin/pipewright launch --nproc-per-node 4 -- " + program + args + " --summary " +
                  dir.file("launched.json") + " --save " + dir.file("launched.safetensors"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  BOOST_TEST(r.output.find("all 4 ranks finished") != std::string::npos, r.output);
  // The in-tree build of the same program (static libraries) as the reference.
  r = run_command(build_dir() + "/bin/example_custom_cnn" + args + " --summary " + dir.file("in_tree.json") + " --save " +
                  dir.file("in_tree.safetensors"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);

  const auto embedded = read_json(dir.file("embedded.json"));
  const auto launched = read_json(dir.file("launched.json"));
  BOOST_TEST(embedded["launcher"] == "threads");
  BOOST_TEST(launched["world_size"] == 4);
  BOOST_TEST(launched["model"] == "custom-cnn");
  const auto losses = embedded["loss_history"];
  BOOST_REQUIRE(losses.size() == 6u);
  BOOST_TEST(losses.back().get<double>() < losses.front().get<double>(), "the loss did not fall: " << losses.dump());
  check_same(dir, "embedded", "launched");
  check_same(dir, "embedded", "in_tree");
}

BOOST_AUTO_TEST_CASE(a_parent_project_adds_pipewright_with_fetch_content) {
  ScratchDir dir("fetch_content");
  const std::string project = dir.file("parent");
  std::filesystem::create_directories(project);
  write(project + "/CMakeLists.txt",
        "cmake_minimum_required(VERSION 3.25)\n"
        "project(parent LANGUAGES CXX)\n"
        "include(FetchContent)\n"
        "set(PW_WITH_CUDA OFF CACHE BOOL \"\" FORCE)\n"
        "FetchContent_Declare(pipewright SOURCE_DIR \"" + std::filesystem::absolute(source_dir()).string() + "\")\n"
        "FetchContent_MakeAvailable(pipewright)\n"
        "add_library(parent_check OBJECT main.cpp)\n"
        "target_link_libraries(parent_check PRIVATE pipewright::pipewright)\n");
  write(project + "/main.cpp",
        "#include <pipewright/pipewright.h>\n"
        "int parent_check() { return PIPEWRIGHT_VERSION_MAJOR + static_cast<int>(pw::train::JobConfig{}.seed); }\n");
  auto r = run_command(cmake() + " -S " + project + " -B " + dir.file("build") + generator());
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  // The parent's own code and an internal library of pipewright, each from its include roots.
  r = run_command(cmake() + " --build " + dir.file("build") + " --target parent_check pw_core");
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  // Tests and benchmarks are pipewright's own business when it is not the top project.
  r = run_command("grep -E '^PW_BUILD_(TESTS|BENCH):BOOL=' " + dir.file("build") + "/CMakeCache.txt");
  BOOST_TEST(r.output.find("PW_BUILD_TESTS:BOOL=OFF") != std::string::npos, r.output);
}

BOOST_AUTO_TEST_SUITE_END()
