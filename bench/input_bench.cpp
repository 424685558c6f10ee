// Input-pipeline benchmark (prints, never asserts): images per second that pipewright's own image
// data set turns an image folder into training batches with N threads. The folder is opened as
// `pipewright train --dataset image-folder` opens it (open_image_folder + make_image_dataset,
// Split::Train, Augment::ImageNet: decode, RandomResizedCrop(S), horizontal flip, ToTensor and
// Normalize), and batches are filled by the engine's own gather (train/data_feed.h gather_rows,
// parallel over samples) inside a oneTBB task_arena of N threads. The samples are an endless
// shuffled stream (a new order and new crops each epoch), so no epoch boundary is timed. One JSON
// line: images, seconds and images/s after the warm-up.
//   build/bin/input_bench --data-dir ROOT [--threads 1] [--batch-size 64] [--image-size 224]
//                         [--warmup-batches 3] [--seconds 10] [--min-batches 5] [--seed 0]
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <oneapi/tbb/task_arena.h>
#include <oneapi/tbb/task_group.h>

#include "core/clock.h"
#include "models/data/image_dataset.h"
#include "models/data/sampler.h"
#include "train/data_feed.h"

using namespace pw;
namespace data = pw::models::data;

namespace {

// Batch after batch of an endless shuffled stream over `size` samples: epoch e's order is the
// engine's (shard_epoch_indices), its crops drawn for epoch e.
class SampleStream {
 public:
  SampleStream(std::int64_t size, std::uint64_t seed) : size_(size), seed_(seed) {}

  std::vector<std::int64_t> next(std::int64_t count, std::int64_t& epoch_of_first) {
    std::vector<std::int64_t> out;
    out.reserve(static_cast<std::size_t>(count));
    epoch_of_first = epoch_;
    while (static_cast<std::int64_t>(out.size()) < count) {
      if (position_ == static_cast<std::int64_t>(order_.size())) {
        order_ = data::shard_epoch_indices(size_, data::Shuffle::Yes, seed_, ++epoch_, {0, 1});
        position_ = 0;
      }
      out.push_back(order_[static_cast<std::size_t>(position_++)]);
    }
    return out;
  }

 private:
  std::int64_t size_;
  std::uint64_t seed_;
  std::int64_t epoch_ = -1;
  std::vector<std::int64_t> order_;
  std::int64_t position_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"images/s of pipewright's image-folder input pipeline (decode + RandomResizedCrop + flip + normalise)"};
  std::string data_dir;
  int threads = 1, image_size = 224, warmup_batches = 3, min_batches = 5;
  std::int64_t batch_size = 64;
  double seconds = 10.0;
  std::uint64_t seed = 0;
  app.add_option("--data-dir", data_dir, "image folder (ROOT/train/CLASS/*.jpg)")->required();
  app.add_option("--threads", threads)->check(CLI::PositiveNumber);
  app.add_option("--batch-size", batch_size)->check(CLI::PositiveNumber);
  app.add_option("--image-size", image_size)->check(CLI::PositiveNumber);
  app.add_option("--warmup-batches", warmup_batches)->check(CLI::NonNegativeNumber);
  app.add_option("--seconds", seconds, "time the batches after the warm-up for at least this long")->check(CLI::PositiveNumber);
  app.add_option("--min-batches", min_batches)->check(CLI::PositiveNumber);
  app.add_option("--seed", seed);
  CLI11_PARSE(app, argc, argv);

  try {
    data::ImageOptions options;
    options.size = image_size;
    options.augment = data::Augment::ImageNet;
    options.seed = seed;
    const auto dataset = data::make_image_dataset(data::open_image_folder(data_dir, data::Split::Train), options,
                                                  data::Split::Train);
    const kernels::Shape sample_shape = dataset->sample_shape();
    SampleStream stream(dataset->size(), seed);
    tbb::task_arena arena(threads);
    std::int64_t images = 0, batches = 0;
    double timed = 0.0;
    arena.execute([&] {
      tbb::task_group_context context;
      const auto fill = [&] {
        std::int64_t epoch = 0;
        const auto indices = stream.next(batch_size, epoch);
        const auto batch = train::gather_rows(dataset.get(), sample_shape, data::DataParts::Both, indices, context, epoch);
        return batch.images.dim(0);
      };
      for (int i = 0; i < warmup_batches; ++i) fill();
      const auto start = Clock::now();
      while (batches < min_batches || timed < seconds) {
        images += fill();
        ++batches;
        timed = seconds_since(start);
      }
    });
    std::printf("%s\n", nlohmann::json{{"bench", "input_pipeline"},
                                       {"framework", "pipewright"},
                                       {"threads", threads},
                                       {"batch_size", batch_size},
                                       {"image_size", image_size},
                                       {"samples_in_folder", dataset->size()},
                                       {"batches", batches},
                                       {"images", images},
                                       {"seconds", timed},
                                       {"images_per_second", static_cast<double>(images) / timed}}
                            .dump()
                            .c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "input_bench: %s\n", e.what());
    return 2;
  }
  return 0;
}
