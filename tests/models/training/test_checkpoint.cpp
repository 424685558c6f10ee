// Weights in the safetensors layout: round trip, and clear errors for files that do not fit.
#include <filesystem>
#include <fstream>
#include <functional>

#include <unistd.h>

#include <boost/test/unit_test.hpp>

#include "kernels/safetensors.h"
#include "models/checkpoint.h"
#include "models/zoo/model_spec.h"
#include "tests/support/test_util.h"

using namespace pw;
using namespace pw::models;
namespace fs = std::filesystem;

namespace {
struct TempDir {
  fs::path path = fs::temp_directory_path() / ("pw_ckpt_" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
};

std::unique_ptr<Sequential> tiny(std::uint64_t seed, const std::string& name = "resnet18") {
  ModelOptions o;
  o.width = 4;
  return build_model(make_model_spec(name, o), seed);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}
}  // namespace

BOOST_AUTO_TEST_SUITE(checkpoint)

BOOST_AUTO_TEST_CASE(save_and_load_round_trip) {
  TempDir dir;
  const auto file = (dir.path / "w.safetensors").string();
  auto a = tiny(1);
  save_weights(*a, file, "resnet18");
  auto b = tiny(2);
  load_weights(*b, file);
  const auto x = test::random_tensor({2, 1, 28, 28}, 4);
  test::check_close(b->forward(x, Mode::Eval).y, a->forward(x, Mode::Eval).y, 0, 0, "logits after load");
  // The file is plain safetensors: every parameter and buffer under its dotted name.
  const auto raw = kernels::load_safetensors(file);
  BOOST_CHECK(raw.count("layer2.0.downsample.0.weight") == 1);
  BOOST_CHECK(raw.count("bn1.running_var") == 1);
}

BOOST_AUTO_TEST_CASE(bad_files_give_one_line_errors_and_leave_the_model_alone) {
  TempDir dir;
  auto model = tiny(1);
  const auto before = model->parameters()[0]->value.to_double_vector();

  BOOST_CHECK_NE(error_of([&] { load_weights(*model, (dir.path / "missing").string()); }).find("cannot open"),
                 std::string::npos);

  const auto garbage = (dir.path / "garbage").string();
  std::ofstream(garbage) << "not a checkpoint at all";
  const auto msg = error_of([&] { load_weights(*model, garbage); });
  BOOST_CHECK_MESSAGE(msg.find("garbage") != std::string::npos && msg.find("safetensors") != std::string::npos, msg);

  const auto good = (dir.path / "good.safetensors").string();
  save_weights(*tiny(3), good, "resnet18");
  const auto size = fs::file_size(good);
  const auto truncated = (dir.path / "truncated.safetensors").string();
  fs::copy_file(good, truncated);
  fs::resize_file(truncated, size - 100);
  BOOST_CHECK_NE(error_of([&] { load_weights(*model, truncated); }).find("truncated"), std::string::npos);

  const auto other = (dir.path / "other.safetensors").string();
  save_weights(*tiny(3, "seed-cnn"), other, "seed-cnn");
  BOOST_CHECK_NE(error_of([&] { load_weights(*model, other); }).find("tensor 'conv1.weight' is F32[32, 1, 3, 3] on cpu:0 but the model needs F32[4, 1, 3, 3]"), std::string::npos);

  BOOST_CHECK(model->parameters()[0]->value.to_double_vector() == before);
}

BOOST_AUTO_TEST_SUITE_END()
