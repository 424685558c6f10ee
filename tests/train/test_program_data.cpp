// A program's own data set (JobConfig::program_data) trains through the engine as a built-in one
// does: wrapping the synthetic set, a 2-stage x 2-replica job gives the built-in set's losses bit
// for bit; its name stands for it in the JSON form, which cannot be read back; a factory that
// gives nothing or a malformed set is a ConfigError at /data/dataset.
#include <atomic>
#include <memory>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "core/error.h"
#include "models/data/dataset.h"
#include "pipewright/fit.h"
#include "tests/train/job_test_util.h"
#include "train/job_config.h"

using namespace pw;

namespace {

using test::step_losses;

train::JobConfig job(int stages, int replicas) {
  test::JobShape shape;
  shape.stages = stages;
  shape.micro_batches = 2;
  shape.replicas = replicas;
  auto c = test::job_of(test::tied_mlp(), shape, 16);
  c.data.steps = 6;
  c.data.eval_batches = 2;
  return c;
}

// The built-in synthetic set behind the program's interface, counting what the ranks read.
class CountingSet final : public models::data::Dataset {
 public:
  CountingSet(std::unique_ptr<models::data::Dataset> inner, std::atomic<int>* images, std::atomic<int>* labels)
      : inner_(std::move(inner)), images_(images), labels_(labels) {}
  std::int64_t size() const override { return inner_->size(); }
  std::vector<std::int64_t> sample_shape() const override { return inner_->sample_shape(); }
  int num_classes() const override { return inner_->num_classes(); }
  std::string name() const override { return "counting " + inner_->name(); }
  void fill(std::int64_t i, float* image, std::int64_t& label) const override {
    ++*images_;
    ++*labels_;
    inner_->fill(i, image, label);
  }
  void fill_image(std::int64_t i, float* image) const override {
    ++*images_;
    inner_->fill_image(i, image);
  }
  std::int64_t fill_label(std::int64_t i) const override {
    ++*labels_;
    return inner_->fill_label(i);
  }

 private:
  std::unique_ptr<models::data::Dataset> inner_;
  std::atomic<int>* images_;
  std::atomic<int>* labels_;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(program_data)

BOOST_AUTO_TEST_CASE(a_program_data_set_trains_as_the_built_in_one) {
  const auto built_in = step_losses(job(2, 2));
  auto c = job(2, 2);
  std::atomic<int> images{0}, labels{0}, opened{0};
  c.program_data = train::ProgramDataset{"counting-synthetic", [&](models::data::Split split) {
                                           ++opened;
                                           return std::make_unique<CountingSet>(
                                               models::data::make_synthetic_images(c.data.synthetic_size, {1, 12, 12},
                                                                                   10, c.seed, split),
                                               &images, &labels);
                                         }};
  c.data.dataset = "fashion-mnist";   // ignored: the program's set is read
  const auto mine = step_losses(c);
  BOOST_REQUIRE_EQUAL(mine.size(), built_in.size());
  for (std::size_t i = 0; i < mine.size(); ++i) BOOST_TEST(mine[i] == built_in[i]);
  // 6 steps of 16 samples for training and 2 test batches of a micro-batch's 16 / (2 micro-batches x
  // 2 replicas) = 4: each sample's image is read once (by the first stage of its replica) and its
  // label once (by the last), and nothing past the last step is read ahead.
  BOOST_TEST(images.load() == 6 * 16 + 2 * 4);
  BOOST_TEST(labels.load() == 6 * 16 + 2 * 4);
  BOOST_TEST(opened.load() >= 2);
}

BOOST_AUTO_TEST_CASE(its_name_stands_for_it_in_the_json_form) {
  auto c = job(1, 1);
  c.program_data = train::ProgramDataset{"my-format", [](models::data::Split) {
                                           return models::data::make_synthetic_images(64, {1, 12, 12}, 10, 1);
                                         }};
  const auto j = train::to_json(c);
  BOOST_TEST(j["data"]["dataset"].get<std::string>() == "program:my-format");
  try {
    train::job_config_from_json(j);
    BOOST_FAIL("a program's data set was read from JSON");
  } catch (const train::ConfigError& e) {
    BOOST_TEST(std::string(e.what()).find("/data/dataset") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(a_factory_that_gives_nothing_is_a_config_error) {
  auto c = job(1, 1);
  c.program_data = train::ProgramDataset{"empty", [](models::data::Split) {
                                           return std::unique_ptr<models::data::Dataset>();
                                         }};
  try {
    step_losses(c);
    BOOST_FAIL("trained without a data set");
  } catch (const train::ConfigError& e) {
    const std::string what = e.what();
    BOOST_TEST_MESSAGE(what);
    BOOST_TEST(what.find("/data/dataset") != std::string::npos);
    BOOST_TEST(what.find("empty") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(a_split_unlike_the_planned_one_is_a_config_error) {
  // The test split has larger samples than the training split the job was planned for: the
  // batches, sized by the plan, must not be written past.
  auto c = job(1, 1);
  c.program_data = train::ProgramDataset{"uneven", [](models::data::Split split) {
                                           const models::data::Split train = models::data::Split::Train;
                                           return models::data::make_synthetic_images(
                                               64, split == train ? kernels::Shape{1, 12, 12} : kernels::Shape{1, 16, 16},
                                               10, 1, split);
                                         }};
  try {
    step_losses(c);
    BOOST_FAIL("trained on a test split of another shape");
  } catch (const train::ConfigError& e) {
    const std::string what = e.what();
    BOOST_TEST_MESSAGE(what);
    BOOST_TEST(what.find("/data/dataset") != std::string::npos);
    BOOST_TEST(what.find("test split") != std::string::npos);
    BOOST_TEST(what.find('\n') == std::string::npos);
  }
}

BOOST_AUTO_TEST_SUITE_END()
