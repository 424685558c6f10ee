#pragma once
// Walks a tar file's members in order with libarchive (for checking shards, not for training:
// training reads a member's bytes straight from its indexed offset).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace pw::models::data::shards {

struct TarMember {
  std::string name;
  std::vector<std::uint8_t> data;
};

// Calls `visit` for every regular-file member. InputError naming `path` when it is not a tar
// file, is truncated or cannot be read.
void for_each_tar_member(const std::string& path, const std::function<void(const TarMember&)>& visit);

}  // namespace pw::models::data::shards
