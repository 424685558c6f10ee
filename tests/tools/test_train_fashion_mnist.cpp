// The acceptance run: one epoch of seed-cnn on Fashion-MNIST reaches at least 88% test accuracy,
// in fp32 and in bf16.
#include <fstream>

#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "tests/tools/cli_runner.h"

BOOST_AUTO_TEST_CASE(seed_cnn_one_epoch_reaches_88_percent) {
  pw::test::ScratchDir dir("fmnist");
  const auto summary = dir.file("s.json");
  const auto r = pw::test::run_pipewright(
      "train --model seed-cnn --dataset fashion-mnist --epochs 1 --batch-size 64 --optimizer adam --lr 0.001 --threads 2 --seed 0 "
      "--log-every 200 --summary " + summary);
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  const auto j = nlohmann::json::parse(std::ifstream(summary));
  BOOST_TEST_MESSAGE("test accuracy " << j["test_accuracy"] << ", " << j["samples_per_second"] << " samples/s");
  BOOST_CHECK_GE(j["test_accuracy"].get<double>(), 0.88);
  BOOST_CHECK_GE(j["test_top5_accuracy"].get<double>(), j["test_accuracy"].get<double>());
  BOOST_CHECK_LE(j["test_top5_accuracy"].get<double>(), 1.0);
  BOOST_CHECK_EQUAL(j["steps"], 937);
}

// The same epoch in bf16 (activations, convolutions and matrix products; F32 master weights).
BOOST_AUTO_TEST_CASE(seed_cnn_one_epoch_in_bf16_reaches_88_percent) {
  pw::test::ScratchDir dir("fmnist-bf16");
  const auto summary = dir.file("s.json");
  const auto r = pw::test::run_pipewright(
      "train --model seed-cnn --dataset fashion-mnist --epochs 1 --batch-size 64 --optimizer adam --lr 0.001 --threads 2 --seed 0 "
      "--precision bf16 --log-every 200 --summary " + summary);
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  const auto j = nlohmann::json::parse(std::ifstream(summary));
  BOOST_TEST_MESSAGE("bf16 test accuracy " << j["test_accuracy"] << ", " << j["samples_per_second"] << " samples/s");
  BOOST_CHECK_EQUAL(j["precision"], "bf16");
  BOOST_CHECK_GE(j["test_accuracy"].get<double>(), 0.88);
  BOOST_CHECK_EQUAL(j["steps"], 937);
}
