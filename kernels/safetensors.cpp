#include "kernels/safetensors.h"

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/durable_file.h"
#include "core/input_file.h"
#include "core/json_text.h"

namespace pw::kernels {
namespace {
constexpr std::uint64_t kMaxHeader = 100 * 1024 * 1024;
}

WrittenFile save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  std::vector<Tensor> host;
  for (const auto& [name, t] : tensors) {
    host.push_back(t.to(Device::cpu()));
    const std::uint64_t bytes = t.nbytes();
    header[name] = {{"dtype", dtype_name(t.dtype())}, {"shape", t.shape()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text.push_back(' ');   // align the data section as the format advises
  Checksum64 sum;
  std::int64_t written = 0;
  write_file_durably(path, [&](const WriteBytes& write) {
    auto put = [&](const void* data, std::size_t bytes) {
      write(data, bytes);
      sum.add(data, bytes);
      written += static_cast<std::int64_t>(bytes);
    };
    const std::uint64_t n = text.size();
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
    put(len, 8);
    put(text.data(), text.size());
    for (const auto& t : host) put(t.raw(), t.nbytes());
  });
  return {written, sum.hex()};
}

NamedTensors load_safetensors(const std::string& path, std::map<std::string, std::string>* metadata) {
  // Opened without blocking and read only when it is a plain file (core/input_file.h): a folder, a
  // FIFO or a device is refused in one line before anything is read.
  const InputFile file(path, "weights file");
  const auto file_size = static_cast<std::uint64_t>(file.size());
  // Everything below reads at an offset, so a short read is a truncated file, never a wait.
  const auto read_at = [&](void* into, std::uint64_t bytes, std::uint64_t offset) {
    return static_cast<std::uint64_t>(file.read_some_at(into, bytes, static_cast<std::int64_t>(offset)));
  };
  unsigned char len[8];
  PW_INPUT_CHECK(read_at(len, 8, 0) == 8, "'" << path << "' is too short to be a safetensors file (needs an 8-byte header length)");
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(len[i]) << (8 * i);
  PW_INPUT_CHECK(n <= kMaxHeader && 8 + n <= file_size,
                 "'" << path << "' is not a safetensors file: header length " << n << " does not fit a file of " << file_size << " bytes");
  std::string text(n, '\0');
  PW_INPUT_CHECK(read_at(text.data(), n, 8) == n, "'" << path << "': could not read its safetensors header");
  // Depth-checked before parsing (core/json_text.h): a header is one object of flat entries.
  const nlohmann::json header = parse_json_text(text, "'" + path + "': safetensors header");
  PW_INPUT_CHECK(header.is_object(), "'" << path << "': safetensors header must be a JSON object");
  const std::uint64_t data_start = 8 + n;
  const std::uint64_t data_size = file_size - data_start;
  NamedTensors out;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (metadata != nullptr && entry.is_object())
        for (const auto& [k, v] : entry.items()) (*metadata)[k] = v.is_string() ? v.get<std::string>() : v.dump();
      continue;
    }
    PW_INPUT_CHECK(entry.is_object() && entry.contains("dtype") && entry.contains("shape") && entry.contains("data_offsets"),
                   "'" << path << "': entry '" << name << "' needs dtype, shape and data_offsets");
    DType dtype;
    Shape shape;
    std::uint64_t begin = 0, end = 0;
    try {
      dtype = dtype_from_name(entry["dtype"].get<std::string>());
      shape = entry["shape"].get<Shape>();
      begin = entry["data_offsets"].at(0).get<std::uint64_t>();
      end = entry["data_offsets"].at(1).get<std::uint64_t>();
    } catch (const nlohmann::json::exception& e) {
      throw InputError("'" + path + "': entry '" + name + "' is malformed: " + e.what());
    } catch (const InputError& e) {
      throw InputError("'" + path + "': entry '" + name + "': " + e.what());
    }
    for (auto d : shape) PW_INPUT_CHECK(d >= 0, "'" << path << "': entry '" << name << "' has a negative dimension");
    const std::uint64_t want = static_cast<std::uint64_t>(shape_numel(shape)) * dtype_size(dtype);
    PW_INPUT_CHECK(begin <= end && end <= data_size && end - begin == want,
                   "'" << path << "': entry '" << name << "' has data_offsets [" << begin << ", " << end << ") but needs "
                       << want << " bytes within a data section of " << data_size << " (truncated file?)");
    Tensor t = Tensor::empty(shape, dtype, Device::cpu());
    PW_INPUT_CHECK(want == 0 || read_at(t.raw(), want, data_start + begin) == want,
                   "'" << path << "': could not read entry '" << name << "'");
    out.emplace(name, std::move(t));
  }
  return out;
}

}  // namespace pw::kernels
