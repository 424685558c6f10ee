// Real files through `pipewright train`: an image folder of PNG and JPEG files, and CIFAR-10
// binary batches, written by the test from generated Fashion-MNIST-like content (a class is a
// pattern, samples add noise), train resnet18 and the loss falls; Fashion-MNIST's own images as
// files reach the accuracy of its IDX files.
#include <turbojpeg.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "models/data/idx_reader.h"
#include "tests/models/data/idx_test_files.h"
#include "tests/models/data/image_test_files.h"
#include "tests/tools/cli_runner.h"
#include "tests/tools/job_outputs.h"

namespace {

using pw::test::Bytes;

// A 64x64 grey garment-like silhouette per class (its width and stripes), with noise.
Bytes class_image(int cls, std::mt19937& rng) {
  std::normal_distribution<double> noise(0.0, 12.0);
  Bytes grey(64 * 64);
  for (int y = 0; y < 64; ++y)
    for (int x = 0; x < 64; ++x) {
      const double half_width = 8 + 5 * cls;
      const bool inside = std::abs(x - 32) < half_width && y > 8 && y < 56;
      const double stripes = cls % 2 == 0 ? 40 * std::sin(y * 0.5 * (cls + 1)) : 40 * std::sin(x * 0.4 * cls);
      grey[y * 64 + x] = static_cast<std::uint8_t>(std::clamp((inside ? 160 + stripes : 30) + noise(rng), 0.0, 255.0));
    }
  return grey;
}

void write(const std::filesystem::path& path, const Bytes& bytes) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// ROOT/{train,val}/classC/imgI: 4 classes of `train` and `val` 64x64 images each, even ones grey
// PNG, odd ones RGB JPEG (.JPG: the extension's case does not matter).
void write_class_folder(const std::filesystem::path& root, int train, int val, std::mt19937& rng) {
  for (const auto& [split, count] : {std::pair<std::string, int>{"train", train}, {"val", val}})
    for (int c = 0; c < 4; ++c)
      for (int i = 0; i < count; ++i) {
        const Bytes grey = class_image(c, rng);
        const auto stem = root / split / ("class" + std::to_string(c)) / ("img" + std::to_string(i));
        if (i % 2 == 0) {
          write(stem.string() + ".png", pw::test::encode_png(grey.data(), 64, 64, PNG_FORMAT_GRAY));
        } else {
          Bytes rgb;
          for (auto v : grey) rgb.insert(rgb.end(), {v, v, v});
          write(stem.string() + ".JPG", pw::test::encode_jpeg(rgb, 64, 64, TJPF_RGB, 90));
        }
      }
}

double mean(const nlohmann::json& losses, std::size_t first, std::size_t count) {
  double sum = 0;
  for (std::size_t i = first; i < first + count; ++i) sum += losses.at(i).get<double>();
  return sum / static_cast<double>(count);
}

void check_loss_falls(const std::string& summary) {
  const auto j = nlohmann::json::parse(std::ifstream(summary));
  const auto& losses = j.at("loss_history");
  BOOST_REQUIRE_GE(losses.size(), 12u);
  const double early = mean(losses, 0, 4), late = mean(losses, losses.size() - 4, 4);
  BOOST_TEST_MESSAGE("loss " << early << " -> " << late << ", test accuracy " << j["test_accuracy"]);
  BOOST_TEST(late < 0.8 * early);
}

BOOST_AUTO_TEST_CASE(resnet18_trains_from_an_image_folder_of_png_and_jpeg_files) {
  pw::test::ScratchDir dir("image_folder");
  std::mt19937 rng(3);
  write_class_folder(dir.path / "images", 64, 8, rng);
  const auto summary = dir.file("s.json");
  const std::string training = " --image-size 32 --epochs 3 --batch-size 16 --optimizer adam --lr 0.003 --threads 2 --seed 1";
  auto r = pw::test::run_pipewright("train --model resnet18 --width 8 --dataset image-folder --data-dir " +
                                    (dir.path / "images").string() + training + " --summary " + summary);
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  check_loss_falls(summary);

  // The same folder packed into shards (several, at a small shard size) trains the same, bitwise:
  // the same samples in the same order, decoded from the same bytes.
  r = pw::test::run_pipewright("data pack " + (dir.path / "images").string() + " " + dir.file("shards") +
                               " --shard-size 64KiB");
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  const auto from_shards = dir.file("shards.json");
  r = pw::test::run_pipewright("train --model resnet18 --width 8 --dataset shards --data-dir " + dir.file("shards") +
                               training + " --summary " + from_shards);
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  const auto folder_run = nlohmann::json::parse(std::ifstream(summary));
  const auto shard_run = nlohmann::json::parse(std::ifstream(from_shards));
  BOOST_TEST(folder_run["loss_history"] == shard_run["loss_history"]);
  BOOST_TEST(folder_run["test_accuracy"] == shard_run["test_accuracy"]);
}

// Fashion-MNIST's own images (Debian's dataset-fashion-mnist): the first 2,000 training and 500
// test samples, once as IDX files and once as a folder of 64x64 files (even samples grey PNG, odd
// ones RGB JPEG, upscaled by nearest neighbour), train resnet18 to test accuracies close to each
// other. Decoding, resizing, labels from folder names and ImageNet normalisation must all be right
// for the folder run to reach the IDX run's accuracy (a wrong label map leaves it near 10%).
BOOST_AUTO_TEST_CASE(fashion_mnist_as_image_files_reaches_the_accuracy_of_its_idx_files) {
  namespace data = pw::models::data;
  const std::filesystem::path debian = "/usr/share/datasets/fashion-mnist";
  pw::test::ScratchDir dir("fashion_files");
  const std::pair<std::string, std::int64_t> splits[] = {{"train", 2000}, {"t10k", 500}};
  for (const auto& [prefix, count] : splits) {
    const auto images = data::read_idx_images((debian / (prefix + "-images-idx3-ubyte.gz")).string());
    const auto labels = data::read_idx_labels((debian / (prefix + "-labels-idx1-ubyte.gz")).string());
    BOOST_REQUIRE(images.count >= count && images.rows == 28 && images.cols == 28);
    const auto pixels = static_cast<std::size_t>(count * 28 * 28);
    write(dir.path / "idx" / (prefix + "-images-idx3-ubyte"),
          pw::test::idx_bytes(data::kIdxImagesMagic, {static_cast<std::uint32_t>(count), 28, 28},
                              Bytes(images.pixels.begin(), images.pixels.begin() + static_cast<std::ptrdiff_t>(pixels))));
    write(dir.path / "idx" / (prefix + "-labels-idx1-ubyte"),
          pw::test::idx_bytes(data::kIdxLabelsMagic, {static_cast<std::uint32_t>(count)},
                              Bytes(labels.labels.begin(), labels.labels.begin() + count)));
    const std::string split = prefix == "train" ? "train" : "val";
    for (std::int64_t i = 0; i < count; ++i) {
      Bytes grey(64 * 64);
      for (int y = 0; y < 64; ++y)
        for (int x = 0; x < 64; ++x)
          grey[static_cast<std::size_t>(y * 64 + x)] =
              images.pixels[static_cast<std::size_t>(i * 784 + (y * 28 / 64) * 28 + x * 28 / 64)];
      char name[32];
      std::snprintf(name, sizeof name, "%05lld", static_cast<long long>(i));
      const auto stem = dir.path / "images" / split / ("class" + std::to_string(labels.labels[static_cast<std::size_t>(i)])) / name;
      if (i % 2 == 0) {
        write(stem.string() + ".png", pw::test::encode_png(grey.data(), 64, 64, PNG_FORMAT_GRAY));
      } else {
        Bytes rgb;
        for (auto v : grey) rgb.insert(rgb.end(), {v, v, v});
        write(stem.string() + ".jpg", pw::test::encode_jpeg(rgb, 64, 64, TJPF_RGB, 90));
      }
    }
  }
  const std::string training =
      " --model resnet18 --width 8 --epochs 3 --batch-size 32 --optimizer adam --lr 0.003 --threads 2 --seed 1";
  const auto idx_summary = dir.file("idx.json"), folder_summary = dir.file("folder.json");
  auto r = pw::test::run_pipewright("train --dataset fashion-mnist --data-dir " + (dir.path / "idx").string() + training +
                                    " --summary " + idx_summary);
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  r = pw::test::run_pipewright("train --dataset image-folder --data-dir " + (dir.path / "images").string() +
                               " --image-size 28 --augment none" + training + " --summary " + folder_summary);
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  const double idx_accuracy = nlohmann::json::parse(std::ifstream(idx_summary)).at("test_accuracy").get<double>();
  const auto folder_run = nlohmann::json::parse(std::ifstream(folder_summary));
  const double folder_accuracy = folder_run.at("test_accuracy").get<double>();
  BOOST_TEST_MESSAGE("test accuracy after 3 epochs of 2000 samples: IDX " << idx_accuracy << ", image files "
                                                                          << folder_accuracy);
  BOOST_TEST(idx_accuracy > 0.6);
  BOOST_TEST(std::abs(folder_accuracy - idx_accuracy) < 0.07);
}

// A 4-stage x 2-replica job reading shards, killed (SIGKILL) in the middle of an epoch and resumed
// from its newest checkpoint, equals the uninterrupted run bitwise; so does the same job run as 8
// processes under `pipewright launch` (every rank reads only its part of the shards).
BOOST_AUTO_TEST_CASE(a_four_by_two_job_on_shards_resumes_mid_epoch_and_runs_as_processes_bitwise) {
  pw::test::ScratchDir dir("shards_4x2");
  std::mt19937 rng(7);
  write_class_folder(dir.path / "images", 48, 8, rng);
  auto r = pw::test::run_pipewright("data pack " + (dir.path / "images").string() + " " + dir.file("shards") +
                                    " --shard-size 64KiB");
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  // 192 training samples in batches of 16: 12 a epoch, so 10 steps end mid-epoch.
  const std::string job = "--model resnet18 --width 4 --dataset shards --data-dir " + dir.file("shards") +
                          " --image-size 32 --batch-size 16 --stages 4 --replicas 2 --micro-batches 4 --steps 10"
                          " --eval-batches 2 --optimizer sgd --lr 0.05 --seed 5 --threads 1 ";
  r = pw::test::run_pipewright("train " + job + "--summary " + dir.file("full.json") + " --save " +
                               dir.file("full.safetensors"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);

  // From step 6 on the checkpoint of step 2 is complete (the next one waits for its write).
  const int kill_at = std::uniform_int_distribution<int>(6, 10)(rng);
  BOOST_TEST_MESSAGE("killed before step " << kill_at);
  const auto ckpt = dir.file("ckpt");
  r = pw::test::run_command("PW_INJECT_FAULT=sigkill@" + std::to_string(kill_at) + ":0 " +
                            pw::test::pipewright_binary() + " train " + job + "--checkpoint-dir " + ckpt +
                            " --checkpoint-every 2");
  BOOST_REQUIRE_MESSAGE(r.status == 128 + 9, "expected SIGKILL, got " << r.status << ": " << r.output);
  r = pw::test::run_pipewright("train " + job + "--resume " + ckpt + " --checkpoint-dir " + ckpt +
                               " --checkpoint-every 2 --summary " + dir.file("resumed.json") + " --save " +
                               dir.file("resumed.safetensors"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  pw::test::check_same(dir, "full", "resumed");
  BOOST_TEST(pw::test::read_json(dir.file("resumed.json"))["resumed_from_step"].get<int>() < kill_at);

  r = pw::test::run_pipewright("launch --nproc-per-node 8 -- " + job + "--summary " + dir.file("procs.json") +
                               " --save " + dir.file("procs.safetensors"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  pw::test::check_same(dir, "full", "procs");
}

// 4 classes of 8 training and 2 test images; of which training image 3 of class 1 is a truncated
// JPEG, training image 0 of class 2 an empty file and test image 1 of class 3 a truncated JPEG.
std::vector<std::string> write_folder_with_bad_images(const std::filesystem::path& root) {
  std::mt19937 rng(5);
  std::vector<std::string> bad;
  for (const auto& [split, count] : {std::pair<std::string, int>{"train", 8}, {"val", 2}})
    for (int c = 0; c < 4; ++c)
      for (int i = 0; i < count; ++i) {
        const Bytes grey = class_image(c, rng);
        const auto stem = root / split / ("class" + std::to_string(c)) / ("img" + std::to_string(i));
        if (i % 2 == 0) {
          Bytes png = pw::test::encode_png(grey.data(), 64, 64, PNG_FORMAT_GRAY);
          if (split == "train" && c == 2 && i == 0) {
            png.clear();
            bad.push_back(stem.string() + ".png");
          }
          write(stem.string() + ".png", png);
        } else {
          Bytes rgb;
          for (auto v : grey) rgb.insert(rgb.end(), {v, v, v});
          Bytes jpeg = pw::test::encode_jpeg(rgb, 64, 64, TJPF_RGB, 90);
          if ((split == "train" && c == 1 && i == 3) || (split == "val" && c == 3 && i == 1)) {
            jpeg.resize(jpeg.size() / 2);
            bad.push_back(stem.string() + ".JPG");
          }
          write(stem.string() + ".JPG", jpeg);
        }
      }
  std::sort(bad.begin(), bad.end(), [](const std::string& a, const std::string& b) {
    return (a.find("/val/") != std::string::npos) < (b.find("/val/") != std::string::npos) ||
           ((a.find("/val/") != std::string::npos) == (b.find("/val/") != std::string::npos) && a < b);
  });
  return bad;   // in sample order: training first
}

BOOST_AUTO_TEST_CASE(a_bad_image_ends_the_job_naming_it_or_is_skipped_and_counted_on_every_job_shape) {
  pw::test::ScratchDir dir("bad_images");
  const auto bad = write_folder_with_bad_images(dir.path / "images");
  const std::string job = "train --model resnet18 --width 8 --dataset image-folder --data-dir " + (dir.path / "images").string() +
                          " --image-size 32 --epochs 1 --batch-size 16 --micro-batches 2 --threads 2 --seed 1";
  auto r = pw::test::run_pipewright(job);
  BOOST_TEST(r.status == 2, r.output);
  BOOST_TEST((r.output.find(bad[0] + ": cannot decode JPEG (Premature end of JPEG file)") != std::string::npos ||
              r.output.find(bad[1] + ": empty file; expected a JPEG or PNG image") != std::string::npos),
             r.output);

  auto run = [&](const std::string& shape) {
    const auto summary = dir.file("skip.json");
    const auto result = pw::test::run_pipewright(job + " --skip-bad-samples " + shape + " --summary " + summary);
    BOOST_REQUIRE_MESSAGE(result.status == 0, shape << ": " << result.output);
    return nlohmann::json::parse(std::ifstream(summary));
  };
  const auto single = run("");
  // Every training sample is read once (32 in 2 steps) and every test sample: each bad one counts once.
  BOOST_TEST(single["bad_samples"]["count"] == 3);
  BOOST_TEST(single["bad_samples"]["first"] == nlohmann::json(bad));
  for (const std::string shape : {"--replicas 2", "--stages 2"}) {
    BOOST_TEST_CONTEXT(shape) {
      const auto j = run(shape);
      BOOST_TEST(j["bad_samples"] == single["bad_samples"]);
      if (shape == "--stages 2") {
        // The last stage read the replacements' labels: the losses are the single device's.
        const auto& a = j["loss_history"];
        const auto& b = single["loss_history"];
        BOOST_REQUIRE_EQUAL(a.size(), b.size());
        for (std::size_t i = 0; i < a.size(); ++i)
          BOOST_CHECK_SMALL(std::abs(a[i].get<double>() - b[i].get<double>()) / b[i].get<double>(), 1e-5);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(normalize_refuses_what_it_cannot_take_naming_the_flag) {
  const auto r = pw::test::run_pipewright("train --dataset image-folder --data-dir /nonexistent --normalize 0.5,0.5:0.2");
  BOOST_TEST(r.status == 2, r.output);
  BOOST_TEST(r.output.find("--normalize: '0.5,0.5:0.2' is not a normalisation: 2 values a side; expected MEAN,...:STD,...") !=
                 std::string::npos,
             r.output);
  const auto m = pw::test::run_pipewright("train --dataset fashion-mnist --normalize 0.5:0.2 --steps 1");
  BOOST_TEST(m.status == 2, m.output);
  BOOST_TEST(m.output.find("--normalize: applies to the image data sets (image-folder, shards, cifar10), not to fashion-mnist") !=
                 std::string::npos,
             m.output);
}

BOOST_AUTO_TEST_CASE(resnet18_trains_from_cifar10_binary_batches) {
  pw::test::ScratchDir dir("cifar10");
  std::mt19937 rng(4);
  auto batch = [&](int records) {
    Bytes out;
    for (int r = 0; r < records; ++r) {
      const int c = r % 4;
      out.push_back(static_cast<std::uint8_t>(c));
      const Bytes grey = class_image(c, rng);
      for (int ch = 0; ch < 3; ++ch)   // 32x32 planes: every other pixel of the 64x64 image
        for (int y = 0; y < 32; ++y)
          for (int x = 0; x < 32; ++x) out.push_back(grey[(2 * y) * 64 + 2 * x]);
    }
    return out;
  };
  for (int i = 1; i <= 5; ++i) write(dir.path / ("data_batch_" + std::to_string(i) + ".bin"), batch(48));
  write(dir.path / "test_batch.bin", batch(32));
  const auto summary = dir.file("s.json");
  const auto r = pw::test::run_pipewright("train --model resnet18 --width 8 --dataset cifar10 --data-dir " + dir.path.string() +
                                          " --epochs 1 --batch-size 16 --optimizer adam --lr 0.003 --threads 2 --seed 1 --summary " +
                                          summary);
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  check_loss_falls(summary);
}

}  // namespace
