// image_survey.h: nearest-rank percentiles, seeded samples of indices, image sizes from headers
// and a decode count over a source of JPEG, PNG and unreadable files. Speed is never asserted.
#include <algorithm>
#include <set>

#include <boost/test/unit_test.hpp>

#include "models/data/image_survey.h"
#include "tests/models/data/image_test_files.h"

namespace pw::models::data {
namespace {

// Encoded samples held in memory.
class MemorySource final : public EncodedSource {
 public:
  explicit MemorySource(std::vector<EncodedSample> samples) : samples_(std::move(samples)) {}
  std::int64_t size() const override { return static_cast<std::int64_t>(samples_.size()); }
  std::vector<std::string> classes() const override { return {"only"}; }
  EncodedSample read(std::int64_t index) const override { return samples_.at(static_cast<std::size_t>(index)); }
  std::int64_t label(std::int64_t) const override { return 0; }
  std::string name() const override { return "memory"; }

 private:
  std::vector<EncodedSample> samples_;
};

// A 40x30 JPEG, a 30x40 PNG, a 50x20 JPEG and a file that is neither.
MemorySource three_images_and_a_bad_one() {
  std::vector<EncodedSample> samples;
  samples.push_back(test::sample_of(test::encode_jpeg(test::smooth_pixels(40, 30, 3), 40, 30, TJPF_RGB), "a.jpg"));
  const auto png = test::smooth_pixels(30, 40, 3);
  samples.push_back(test::sample_of(test::encode_png(png.data(), 30, 40, PNG_FORMAT_RGB), "b.png"));
  samples.push_back(test::sample_of(test::encode_jpeg(test::smooth_pixels(50, 20, 3), 50, 20, TJPF_RGB), "c.jpg"));
  samples.push_back(test::sample_of({'n', 'o', 'p', 'e'}, "d.jpg"));
  return MemorySource(std::move(samples));
}

BOOST_AUTO_TEST_SUITE(image_survey)

BOOST_AUTO_TEST_CASE(percentiles_are_nearest_rank) {
  std::vector<int> values;
  for (int v = 20; v >= 1; --v) values.push_back(v);
  const Percentiles p = percentiles(values);
  BOOST_TEST(p.min == 1);
  BOOST_TEST(p.p5 == 1);    // ceil(0.05 * 20) = 1st
  BOOST_TEST(p.p50 == 10);  // 10th
  BOOST_TEST(p.p95 == 19);  // 19th
  BOOST_TEST(p.max == 20);
  const Percentiles one = percentiles({7});
  BOOST_TEST((one.min == 7 && one.p5 == 7 && one.p50 == 7 && one.p95 == 7 && one.max == 7));
  BOOST_TEST(percentiles({}).max == 0);
}

BOOST_AUTO_TEST_CASE(sample_indices_are_all_of_a_small_set_and_a_seeded_subset_of_a_large_one) {
  BOOST_TEST(sample_indices(5, 10, 3) == (std::vector<std::int64_t>{0, 1, 2, 3, 4}));
  BOOST_TEST(sample_indices(0, 10, 3).empty());
  const auto a = sample_indices(100000, 200, 7);
  BOOST_REQUIRE_EQUAL(a.size(), 200u);
  BOOST_TEST(std::is_sorted(a.begin(), a.end()));
  BOOST_TEST(std::set<std::int64_t>(a.begin(), a.end()).size() == 200u);
  BOOST_TEST((a.front() >= 0 && a.back() < 100000));
  BOOST_TEST(sample_indices(100000, 200, 7) == a);
  BOOST_TEST(sample_indices(100000, 200, 8) != a);
  // Spread over the range, not bunched at one end.
  BOOST_TEST(a.front() < 10000);
  BOOST_TEST(a.back() > 90000);
}

BOOST_AUTO_TEST_CASE(sizes_come_from_the_headers_and_an_unreadable_file_is_counted) {
  const MemorySource source = three_images_and_a_bad_one();
  const SizeSurvey s = survey_sizes(source, 2000, 0);
  BOOST_TEST(s.sampled == 4);
  BOOST_TEST(s.readable == 3);
  BOOST_TEST((s.width.min == 30 && s.width.p50 == 40 && s.width.max == 50));
  BOOST_TEST((s.height.min == 20 && s.height.p50 == 30 && s.height.max == 40));
  BOOST_TEST_INFO(s.first_unreadable);
  BOOST_TEST(s.first_unreadable.find("d.jpg") != std::string::npos);
  BOOST_TEST(s.first_unreadable.find('\n') == std::string::npos);

  const SizeSurvey two = survey_sizes(source, 2, 0);
  BOOST_TEST(two.sampled == 2);
}

BOOST_AUTO_TEST_CASE(decoding_decodes_every_readable_sample_in_full) {
  const MemorySource source = three_images_and_a_bad_one();
  const DecodeSurvey d = time_decoding(source, 200, 0);
  BOOST_TEST(d.sampled == 4);
  BOOST_TEST(d.decoded == 3);
  BOOST_TEST(d.pixels == 40 * 30 + 30 * 40 + 50 * 20);
  BOOST_TEST(d.seconds > 0.0);
  BOOST_TEST(d.images_per_second() > 0.0);
  BOOST_TEST(time_decoding(source, 0, 0).sampled == 0);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
}  // namespace pw::models::data
