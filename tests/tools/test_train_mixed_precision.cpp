// bf16 training tracks fp32 over a real run: resnet18 (width 16) for 300 steps on Fashion-MNIST
// ends within 5% of the fp32 loss, both from the same seed and batches. The CLI end to end.
#include <fstream>
#include <numeric>

#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "tests/tools/cli_runner.h"

namespace {

nlohmann::json train(const pw::test::ScratchDir& dir, const std::string& precision) {
  const auto summary = dir.file(precision + ".json");
  const auto r = pw::test::run_pipewright(
      "train --model resnet18 --width 16 --dataset fashion-mnist "
      "--batch-size 32 --steps 300 --optimizer sgd --lr 0.01 --momentum 0.9 --threads 2 --seed 3 --eval-batches 0 "
      "--log-every 100 --precision " + precision + " --summary " + summary);
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  return nlohmann::json::parse(std::ifstream(summary));
}

// The mean of the last 150 steps' losses (the same batches in both runs). The trajectory is
// chaotic: two fp32 runs that differ only in summation order (--threads 1 against 2) end 0.3% and
// 1.3% apart over this window (seeds 3, 4; AMD EPYC), and bf16 against fp32 measured 2.5%, 2.8%
// and 0.03% (seeds 3/4/5, EPYC with AVX512-BF16) and 0.2-1.1% over 100 steps on a Xeon with AMX.
// 5% keeps this check about precision: bf16 weights without fp32 masters, or a wrong scale, stop
// the loss falling well before it reaches half of the first step's.
double final_loss(const nlohmann::json& j) {
  const auto h = j["loss_history"].get<std::vector<double>>();
  BOOST_REQUIRE_EQUAL(h.size(), 300u);
  return std::accumulate(h.end() - 150, h.end(), 0.0) / 150.0;
}

}  // namespace

BOOST_AUTO_TEST_CASE(resnet18_in_bf16_ends_within_five_percent_of_fp32) {
  pw::test::ScratchDir dir("mixed-precision");
  const auto fp32 = train(dir, "fp32");
  const auto bf16 = train(dir, "bf16");
  const double a = final_loss(fp32), b = final_loss(bf16);
  const double first = fp32["loss_history"][0].get<double>();
  BOOST_TEST_MESSAGE("resnet18 w16, 300 steps: fp32 loss " << a << " (" << fp32["steady_samples_per_second"]
                                                           << " samples/s), bf16 " << b << " ("
                                                           << bf16["steady_samples_per_second"] << " samples/s)");
  BOOST_CHECK_LT(a, 0.5 * first);   // both learned: the comparison is between trained models
  BOOST_CHECK_LT(b, 0.5 * first);
  BOOST_CHECK_SMALL(std::abs(b - a) / a, 0.05);
  BOOST_CHECK_EQUAL(bf16["precision"], "bf16");
}
