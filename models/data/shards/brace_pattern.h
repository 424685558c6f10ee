#pragma once
// Brace patterns as WebDataset and the shell write shard lists: "train-{000000..000031}.tar" (a
// numeric range; zero-padded when either end is) and "{train,val}-000000.tar" (a list). Several
// groups give every combination, left to right; groups do not nest.
#include <string>
#include <vector>

namespace pw::models::data::shards {

bool has_braces(const std::string& pattern);
// InputError naming the pattern for an unmatched or nested brace, an empty group or a range that
// is not two integers.
std::vector<std::string> expand_braces(const std::string& pattern);

}  // namespace pw::models::data::shards
