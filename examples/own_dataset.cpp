// A program's own data set: a format pipewright does not know, read through the same engine as the
// built-in sets (each rank reads only its part of every batch, prefetch, checkpoints and resume).
//
// The format here: a folder with `train/` and `test/`, each holding `labels.txt` (one class index
// per line) and `images.bin`, the samples one after another as 1x32x32 little-endian floats.
// `--write-demo DIR` writes such a folder (drawn shapes: class k is a filled disc, square, ring,
// cross or bar), then the job trains on it.
//
//   example_own_dataset --write-demo /tmp/shapes --steps 60
//   example_own_dataset --data /tmp/shapes --steps 60 --stages 2 --replicas 2
//   pipewright launch --nproc-per-node 4 -- example_own_dataset --data /tmp/shapes --stages 2 --replicas 2
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include <pipewright/pipewright.h>

namespace {

constexpr int kSide = 32;
constexpr int kClasses = 5;

// Reads one sample at a time from images.bin at its offset: nothing is loaded up front, so a rank
// that feeds no inputs (a later pipeline stage) pays nothing for opening it. fill() runs on several
// loader threads at once, so each call opens its own stream.
class FloatFolder final : public pw::models::data::Dataset {
 public:
  FloatFolder(const std::filesystem::path& root, pw::models::data::Split split)
      : dir_(root / (split == pw::models::data::Split::Train ? "train" : "test")) {
    std::ifstream labels(dir_ / "labels.txt");
    if (!labels) throw pw::InputError(dir_.string() + ": no labels.txt (write a demo set with --write-demo DIR)");
    for (std::int64_t label; labels >> label;) {
      if (label < 0 || label >= kClasses)
        throw pw::InputError((dir_ / "labels.txt").string() + ": label " + std::to_string(label) + " at line " +
                             std::to_string(labels_.size() + 1) + "; expected 0.." + std::to_string(kClasses - 1));
      labels_.push_back(label);
    }
    const auto bytes = std::filesystem::file_size(dir_ / "images.bin");
    if (bytes != labels_.size() * kSampleBytes)
      throw pw::InputError((dir_ / "images.bin").string() + ": " + std::to_string(bytes) + " bytes; " +
                           std::to_string(labels_.size()) + " labels need " +
                           std::to_string(labels_.size() * kSampleBytes));
  }

  std::int64_t size() const override { return static_cast<std::int64_t>(labels_.size()); }
  std::vector<std::int64_t> sample_shape() const override { return {1, kSide, kSide}; }
  int num_classes() const override { return kClasses; }
  std::string name() const override { return "float folder " + dir_.string(); }

  void fill(std::int64_t index, float* image_out, std::int64_t& label_out) const override {
    fill_image(index, image_out);
    label_out = fill_label(index);
  }
  void fill_image(std::int64_t index, float* image_out) const override {
    std::ifstream in(dir_ / "images.bin", std::ios::binary);
    in.seekg(static_cast<std::streamoff>(index * kSampleBytes));
    if (!in.read(reinterpret_cast<char*>(image_out), kSampleBytes))
      throw pw::InputError((dir_ / "images.bin").string() + ": cannot read sample " + std::to_string(index));
  }
  std::int64_t fill_label(std::int64_t index) const override { return labels_.at(static_cast<std::size_t>(index)); }

 private:
  static constexpr std::int64_t kSampleBytes = std::int64_t{kSide} * kSide * sizeof(float);
  std::filesystem::path dir_;
  std::vector<std::int64_t> labels_;
};

// A shape of class `label` at a random place and size, on a noisy background.
std::vector<float> draw(int label, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  const float cx = 10 + 12 * u(rng), cy = 10 + 12 * u(rng), r = 5 + 4 * u(rng);
  std::vector<float> img(kSide * kSide);
  for (int y = 0; y < kSide; ++y) {
    for (int x = 0; x < kSide; ++x) {
      const float dx = static_cast<float>(x) - cx, dy = static_cast<float>(y) - cy;
      const float d = std::sqrt(dx * dx + dy * dy);
      bool on = false;
      switch (label) {
        case 0: on = d < r; break;                                                         // disc
        case 1: on = std::abs(dx) < r && std::abs(dy) < r; break;                          // square
        case 2: on = d < r && d > r - 2.5f; break;                                         // ring
        case 3: on = (std::abs(dx) < 1.5f || std::abs(dy) < 1.5f) && d < r + 2; break;    // cross
        default: on = std::abs(dy) < 2.0f && std::abs(dx) < r + 3; break;                 // bar
      }
      img[static_cast<std::size_t>(y * kSide + x)] = (on ? 1.0f : 0.0f) + 0.3f * (u(rng) - 0.5f);
    }
  }
  return img;
}

void write_split(const std::filesystem::path& dir, int samples, std::uint64_t seed) {
  std::filesystem::create_directories(dir);
  std::ofstream labels(dir / "labels.txt");
  std::ofstream images(dir / "images.bin", std::ios::binary);
  std::mt19937_64 rng(seed);
  for (int i = 0; i < samples; ++i) {
    const int label = i % kClasses;
    const auto img = draw(label, rng);
    labels << label << "\n";
    images.write(reinterpret_cast<const char*>(img.data()), static_cast<std::streamsize>(img.size() * sizeof(float)));
  }
  if (!labels || !images) throw pw::InputError("cannot write the demo data set in " + dir.string());
}

void write_demo(const std::filesystem::path& root) {
  write_split(root / "train", 2400, 2024);
  write_split(root / "test", 400, 2025);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Trains a CNN on a data set in the program's own format"};
  std::string data_dir, demo_dir;
  std::int64_t steps = 60;
  int stages = 1, replicas = 1;
  app.add_option("--data", data_dir, "folder with train/ and test/, each with labels.txt and images.bin");
  app.add_option("--write-demo", demo_dir, "write a demo data set of drawn shapes here first, then train on it");
  app.add_option("--steps", steps, "training steps")->check(CLI::PositiveNumber);
  app.add_option("--stages", stages, "pipeline stages")->check(CLI::PositiveNumber);
  app.add_option("--replicas", replicas, "data-parallel replicas")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    if (!demo_dir.empty()) {
      write_demo(demo_dir);
      data_dir = demo_dir;
    }
    if (data_dir.empty()) throw pw::InputError("--data DIR or --write-demo DIR is required");

    pw::train::JobConfig job;
    job.model.name = "resnet18";
    job.model.width = 8;
    // The engine opens the set on every rank, for each split it uses; the name stands for it in
    // the job's JSON form and its checkpoints.
    job.program_data = pw::train::ProgramDataset{
        "float-folder", [data_dir](pw::models::data::Split split) -> std::unique_ptr<pw::models::data::Dataset> {
          return std::make_unique<FloatFolder>(data_dir, split);
        }};
    job.data.steps = steps;
    job.data.batch_size = 32;
    job.data.eval_batches = 10;
    job.pipeline.stages = stages;
    job.replicas.replicas = replicas;
    job.optimizer.kind = pw::models::OptimizerKind::Adam;
    job.optimizer.lr = 2e-3;
    job.resources.threads = 1;
    pw::train::FitOptions out;
    const auto summary = pw::train::run_job(job, out);
    // Under a launcher every process returns here; the job's figures are the primary rank's.
    if (summary.contains("test_accuracy")) std::printf("test accuracy %.3f\n", summary["test_accuracy"].get<double>());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "example_own_dataset: %s\n", e.what());
    return 1;
  }
}
