#include "tools/data_command.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "core/units.h"
#include "models/data/shards/data_summary.h"
#include "models/data/shards/pack.h"
#include "tools/pack_progress.h"

namespace pw::tools {
namespace {

namespace shards = models::data::shards;

void run_pack(const DataOptions& o) {
  shards::PackOptions options;
  options.shard_bytes = parse_bytes(o.shard_size);
  PackProgressBar bar;
  shards::ShardManifest manifest;
  try {
    manifest = shards::pack_image_folder(o.root, o.out, options, [&](const shards::PackProgress& p) { bar.update(p); });
  } catch (...) {
    bar.finish();
    throw;
  }
  bar.finish();
  std::int64_t files = 0;
  std::int64_t bytes = 0;
  std::string counts;
  for (const auto& split : manifest.splits) {
    files += static_cast<std::int64_t>(split.shards.size());
    for (const auto& shard : split.shards) bytes += shard.bytes;
    counts += (counts.empty() ? "" : ", ") + std::to_string(split.samples) + " " + split.name;
  }
  std::printf("packed %s samples of %zu classes into %lld shards (%s) in %s\n", counts.c_str(), manifest.classes.size(),
              static_cast<long long>(files), format_bytes(bytes).c_str(), o.out.c_str());
}

std::string class_list(const std::vector<std::string>& classes) {
  constexpr std::size_t kShown = 10;
  std::string out;
  for (std::size_t i = 0; i < classes.size() && i < kShown; ++i) out += (i == 0 ? "" : ", ") + classes[i];
  if (classes.size() > kShown) out += ", ... (" + std::to_string(classes.size() - kShown) + " more)";
  return out;
}

std::string percentile_text(const models::data::Percentiles& p) {
  return "min " + std::to_string(p.min) + ", p5 " + std::to_string(p.p5) + ", p50 " + std::to_string(p.p50) + ", p95 " +
         std::to_string(p.p95) + ", max " + std::to_string(p.max);
}

// "train image sizes (headers of all 384): width min ..., height min ..." and, for files that
// could not be read, how many and the first one's reason.
void print_image_sizes(const std::string& split, std::int64_t samples, const models::data::SizeSurvey& s) {
  if (s.sampled == 0) return;
  const std::string which = s.sampled == samples ? "all " + std::to_string(samples)
                                                 : std::to_string(s.sampled) + " sampled of " + std::to_string(samples);
  if (s.readable > 0)
    std::printf("%s image sizes (headers of %s): width %s; height %s\n", split.c_str(), which.c_str(),
                percentile_text(s.width).c_str(), percentile_text(s.height).c_str());
  if (s.readable < s.sampled)
    std::printf("%s unreadable images: %lld of %s (first: %s)\n", split.c_str(),
                static_cast<long long>(s.sampled - s.readable), which.c_str(), s.first_unreadable.c_str());
}

// "decode: 650 images/s, 120.3 Mpixel/s on one thread (200 of 384 train images, decoded in full)".
void print_decode(const shards::SplitSummary& split, const models::data::DecodeSurvey& d) {
  if (d.sampled == 0) return;
  const std::string which = (d.sampled == split.samples ? "all " : std::to_string(d.sampled) + " of ") +
                            std::to_string(split.samples) + " " + split.name + " images";
  if (d.decoded == 0) {
    std::printf("decode: none of %s decodes\n", which.c_str());
    return;
  }
  std::printf("decode: %.0f images/s, %.1f Mpixel/s on one thread (%s, decoded in full%s)\n", d.images_per_second(),
              static_cast<double>(d.pixels) / d.seconds * 1e-6, which.c_str(),
              d.decoded < d.sampled ? "; the unreadable skipped" : "");
}

void print_split(const shards::SplitSummary& s, const std::vector<std::string>& classes) {
  std::printf("%s: %lld samples", s.name.c_str(), static_cast<long long>(s.samples));
  if (s.shards > 0) std::printf(" in %lld shards", static_cast<long long>(s.shards));
  const auto& b = s.encoded_bytes;
  std::printf("; encoded bytes min %lld, median %lld, p90 %lld, max %lld\n", static_cast<long long>(b.min),
              static_cast<long long>(b.median), static_cast<long long>(b.p90), static_cast<long long>(b.max));
  print_image_sizes(s.name, s.samples, s.image_sizes);
  std::int64_t fewest = -1;
  std::int64_t most = 0;
  for (std::size_t c = 0; c < classes.size(); ++c) {
    const std::int64_t n = s.class_counts[c];
    fewest = fewest < 0 ? n : std::min(fewest, n);
    most = std::max(most, n);
    if (classes.size() <= 20) std::printf("  %-24s %lld\n", classes[c].c_str(), static_cast<long long>(n));
  }
  if (classes.size() > 20)
    std::printf("  per class: %lld to %lld samples\n", static_cast<long long>(fewest), static_cast<long long>(most));
}

void run_inspect(const DataOptions& o) {
  const shards::DataSummary d = shards::summarize_data(o.inspect_path, !o.no_verify);
  std::printf("%s %s\n", d.kind.c_str(), d.path.c_str());
  std::printf("classes: %zu (%s)\n", d.classes.size(), class_list(d.classes).c_str());
  for (const auto& split : d.splits) print_split(split, d.classes);
  if (d.decode && !d.splits.empty()) print_decode(d.splits.front(), *d.decode);
  if (d.verified)
    std::printf("verified: %lld shards, %lld samples, %s: checksums and members match the index\n",
                static_cast<long long>(d.verified->shards), static_cast<long long>(d.verified->samples),
                format_bytes(d.verified->bytes).c_str());
}

}  // namespace

void add_data_command(CLI::App& app, DataOptions& o) {
  auto* data = app.add_subcommand("data", "pack an image folder into tar shards, or inspect a data set");
  data->require_subcommand(1);
  auto* pack = data->add_subcommand("pack", "pack ROOT/{train,val}/CLASS/*.{jpg,jpeg,png} into tar shards with an index and a manifest");
  pack->add_option("ROOT", o.root, "image folder (ROOT/train/CLASS/..., optionally ROOT/val/CLASS/...)")->required();
  pack->add_option("OUT", o.out, "new or empty folder for the shards, index and manifest")->required();
  pack->add_option("--shard-size", o.shard_size, "roll to the next shard before this size (e.g. 256MiB, 1GiB)")->capture_default_str();
  pack->callback([&o] { run_pack(o); });
  auto* inspect = data->add_subcommand("inspect", "classes, samples per split and class, encoded sizes, image sizes, decode speed; checks shards in full");
  inspect->add_option("PATH", o.inspect_path, "image folder, shard folder, shard file or brace pattern")->required();
  inspect->add_flag("--no-verify", o.no_verify, "shards: skip reading every shard (checksums and members)");
  inspect->callback([&o] { run_inspect(o); });
}

}  // namespace pw::tools
