#pragma once
// The names open_dataset accepts (models/data/dataset.h), for messages and config checks.
#include <string>
#include <vector>

namespace pw::models::data {

std::vector<std::string> dataset_names();

}  // namespace pw::models::data
