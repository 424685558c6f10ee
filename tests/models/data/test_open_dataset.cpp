#include <cstdlib>

#include <boost/test/unit_test.hpp>

#include "models/data/dataset.h"
#include "tests/models/data/idx_test_files.h"

namespace pw::models::data {
namespace {

using pw::test::MessageMentions;

BOOST_AUTO_TEST_SUITE(open_dataset_by_name)

BOOST_AUTO_TEST_CASE(opens_fashion_mnist_from_the_default_folder) {
  const auto set = open_dataset("fashion-mnist", Split::Test);
  BOOST_TEST(set->size() == 10000);
  BOOST_TEST(set->name() == "fashion-mnist");
}

// The library reads no environment: PW_FASHION_MNIST_DIR is the command line's default (tools/).
BOOST_AUTO_TEST_CASE(the_folder_option_overrides_the_default) {
  test::TempDir empty;
  DatasetOptions options;
  options.fashion_mnist_dir = empty.str();
  BOOST_CHECK_EXCEPTION(open_dataset("fashion-mnist", Split::Train, options), InputError,
                        MessageMentions{empty.file("train-images-idx3-ubyte.gz")});
  BOOST_CHECK_EXCEPTION(open_dataset("fashion-mnist", Split::Test, options), InputError,
                        MessageMentions{empty.file("t10k-images-idx3-ubyte.gz")});
}

BOOST_AUTO_TEST_CASE(opens_synthetic_sets_with_any_shape) {
  DatasetOptions options;
  options.synthetic_shape = parse_sample_shape("3x224x224");
  options.synthetic_size = 123;
  options.synthetic_classes = 1000;
  const auto set = open_dataset("synthetic", Split::Train, options);
  BOOST_TEST(set->size() == 123);
  BOOST_TEST(set->num_classes() == 1000);
  BOOST_TEST(set->sample_shape() == (kernels::Shape{3, 224, 224}), boost::test_tools::per_element());
  BOOST_TEST(open_dataset("synthetic", Split::Train)->size() == 60000);
  BOOST_TEST(open_dataset("synthetic", Split::Test)->size() == 10000);
}

BOOST_AUTO_TEST_CASE(unknown_names_list_the_accepted_ones) {
  BOOST_CHECK_EXCEPTION(open_dataset("imagenet", Split::Train), InputError,
                        MessageMentions{"unknown data set 'imagenet'; accepted: fashion-mnist, synthetic"});
}

BOOST_AUTO_TEST_CASE(sample_shapes_parse_or_explain_the_form) {
  BOOST_TEST(parse_sample_shape("1x28x28") == (kernels::Shape{1, 28, 28}), boost::test_tools::per_element());
  for (const char* bad : {"", "28x28", "1x28x28x1", "1x0x28", "1xx28", "ax28x28", "1x28x28 ", "-1x28x28"}) {
    BOOST_CHECK_EXCEPTION(parse_sample_shape(bad), InputError, MessageMentions{"expected CxHxW"});
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
}  // namespace pw::models::data
