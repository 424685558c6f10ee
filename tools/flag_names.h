#pragma once
// Which flag sets which field: each flag records the path of the field it binds when it is added,
// and messages from the library, which name fields by their paths ("/optimizer/lr"), are told
// back to the command line with the flags' names ("--lr").
#include <string>
#include <utility>
#include <vector>

#include "pipewright/job_config.h"

namespace pw::tools {

class FlagNames {
 public:
  void add(std::string path, std::string flag) { entries_.emplace_back(std::move(path), std::move(flag)); }
  // The flag of `path` or of the field it is an element of ("/resources/devices/2"); empty when none.
  std::string flag_of(const std::string& path) const;
  // `text` with every field path in it replaced by its flag; paths no flag sets stay.
  std::string translate(const std::string& text) const;
  // "--lr: -1; must be >= 0" for a ConfigError at /optimizer/lr.
  std::string message_of(const train::ConfigError& error) const;

 private:
  std::vector<std::pair<std::string, std::string>> entries_;   // path, flag
};

}  // namespace pw::tools
