// core/json_text.h: JSON from user files is depth-checked before it is parsed, and every failure is
// an InputError naming its source.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include <boost/test/unit_test.hpp>

#include "core/error.h"
#include "core/json_text.h"
#include "tests/support/input_error.h"

namespace fs = std::filesystem;

using pw::test::input_error;

BOOST_AUTO_TEST_SUITE(json_text)

BOOST_AUTO_TEST_CASE(nesting_past_the_bound_is_refused_before_parsing) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  BOOST_TEST(input_error([&] { pw::parse_json_text(deep, "--config x.json"); }) ==
             "--config x.json: JSON nested deeper than 64 levels; accepted are lists and objects nested at most 64 deep");
  // 64 levels are accepted, 65 are not; lists and objects count alike.
  BOOST_TEST(pw::parse_json_text(std::string(64, '[') + std::string(64, ']'), "t").is_array());
  BOOST_TEST(!input_error([] { pw::parse_json_text(std::string(65, '[') + std::string(65, ']'), "t"); }).empty());
  std::string objects;
  for (int i = 0; i < 65; ++i) objects += "{\"a\":";
  objects += "1" + std::string(65, '}');
  BOOST_TEST(input_error([&] { pw::parse_json_text(objects, "t"); }).find("nested deeper than 64") != std::string::npos);
  BOOST_TEST(input_error([&] { pw::parse_json_text(std::string(9, '['), "t", 8); }).find("deeper than 8") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(brackets_inside_strings_do_not_count) {
  const std::string text = R"({"a": "[[[[[[[[[[\"[[[[[[[[\\", "b": "{{{{{{{{{{{{"})";
  const auto j = pw::parse_json_text(text, "t", 2);
  BOOST_TEST(j["a"].get<std::string>() == "[[[[[[[[[[\"[[[[[[[[\\");
  // After an escaped backslash the quote ends the string: the brackets after it count.
  BOOST_TEST(!input_error([] { pw::parse_json_text(R"(["\\", [[[1]]]])", "t", 3); }).empty());
  BOOST_TEST(pw::parse_json_text(R"(["\\", [[1]]])", "t", 3).size() == 2u);
}

BOOST_AUTO_TEST_CASE(syntax_errors_are_input_errors_naming_the_source) {
  const auto message = input_error([] { pw::parse_json_text("{\"a\": ", "manifest m.json"); });
  BOOST_TEST(message.rfind("manifest m.json: not JSON (", 0) == 0u, message);
  BOOST_TEST(!input_error([] { pw::parse_json_text("1e400", "t"); }).empty());
  BOOST_TEST(!input_error([] { pw::parse_json_text("", "t"); }).empty());
}

BOOST_AUTO_TEST_CASE(files_must_be_plain_readable_and_small_enough) {
  const auto dir = fs::temp_directory_path() / ("pw_json_text_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto file = (dir / "a.json").string();
  std::ofstream(file) << R"({"x": [1, 2, 3]})";
  BOOST_TEST(pw::read_json_file(file, "a")["x"].size() == 3u);
  BOOST_TEST(input_error([&] { pw::read_json_file(file, "a", 4); }).find("a '" + file + "' is ") == 0u);
  BOOST_TEST(input_error([&] { pw::read_json_file(file, "a", 4); }).find("more than the 4 accepted") != std::string::npos);
  BOOST_TEST(input_error([&] { pw::read_json_file(dir.string(), "d"); }).find("d '" + dir.string() + "' is a folder") == 0u);
  const auto fifo = (dir / "f.fifo").string();
  BOOST_REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  BOOST_TEST(input_error([&] { pw::read_json_file(fifo, "f"); }).find("is a named pipe (FIFO)") != std::string::npos);
  BOOST_TEST(input_error([&] { pw::read_json_file((dir / "none.json").string(), "n"); }).find("cannot open n '") == 0u);
  std::ofstream(file) << "[1, 2";
  BOOST_TEST(input_error([&] { pw::read_json_file(file, "a"); }).find("a " + file + ": not JSON") == 0u);
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_SUITE_END()
