#pragma once
// Flags that bind straight to JobConfig fields, shared by the commands that build a job
// (`pipewright train`, `pipewright plan`): each flag records the path of the field it sets, so the
// library's messages, which name fields by path, are told back with the flags' names.
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/error.h"
#include "kernels/device.h"
#include "partition/cost_model.h"
#include "tools/flag_names.h"
#include "train/job_config.h"

namespace pw::tools {

// Adds a command's flags and records, for each, the path of the JobConfig field it sets.
struct Binder {
  CLI::App& cmd;
  FlagNames& names;

  template <typename T>
  CLI::Option* option(const std::string& flag, const std::string& path, T& field, const std::string& help) {
    names.add(path, flag);
    return cmd.add_option(flag, field, help);
  }
  CLI::Option* flag(const std::string& flag, const std::string& path, bool& field, const std::string& help) {
    names.add(path, flag);
    return cmd.add_flag(flag, field, help);
  }
  // A flag whose text the config holds as another type: parsed when the flag is read, and an
  // error names the flag.
  template <typename T, typename Parse>
  CLI::Option* parsed(const std::string& flag, const std::string& path, T& field, Parse parse, const std::string& help) {
    names.add(path, flag);
    return cmd.add_option_function<std::string>(
        flag,
        [flag, &field, parse](const std::string& text) {
          try {
            field = parse(text);
          } catch (const InputError& e) {
            throw InputError(flag + ": " + e.what());
          }
        },
        help);
  }
  // A flag without a value that sets an enum field to `value`.
  template <typename E>
  CLI::Option* flag_setting(const std::string& flag, const std::string& path, E& field, E value, const std::string& help) {
    names.add(path, flag);
    return cmd.add_flag_callback(flag, [&field, value] { field = value; }, help);
  }
  template <typename E>
  CLI::Option* choice(const std::string& flag, const std::string& path, E& field, const std::string& help) {
    return parsed(flag, path, field, [](const std::string& text) { return parse_enum<E>(text); },
                  enum_choices<E>() + (help.empty() ? "" : ": " + help))
        ->default_str(std::string(enum_name(field)));
  }
  // --recompute: a mode for every stage ("all"), or one entry per stage ("none,all,all,none").
  CLI::Option* recompute(train::PipelineConfig& pipeline, const std::string& help) {
    const std::string flag = "--recompute";
    names.add("/pipeline/recompute", flag);
    return cmd
        .add_option_function<std::string>(
            flag,
            [flag, &pipeline](const std::string& text) {
              try {
                if (text.find(',') == std::string::npos) {
                  pipeline.recompute = parse_enum<partition::Recompute>(text);
                  pipeline.recompute_stages.clear();
                } else {
                  pipeline.recompute_stages = partition::parse_recompute_stages(text);
                  pipeline.recompute = partition::Recompute::None;
                }
              } catch (const InputError& e) {
                throw InputError(flag + ": " + e.what());
              }
            },
            enum_choices<partition::Recompute>() + ", or one per stage such as none,all,all,none: " + help)
        ->default_str(partition::recompute_text(pipeline.recompute, pipeline.recompute_stages));
  }
};

// `--config FILE`: starts from a job config's JSON form (as --print-config and plan --write-config
// write it). Add it before the flags that bind fields, so that those given beside it override its
// fields (CLI11 applies options in the order they were added).
CLI::Option* add_config_option(CLI::App& cmd, train::JobConfig& job);

// "cpu:0,cpu:1" -> those devices (--devices of train and plan); InputError naming a bad one.
std::vector<kernels::Device> parse_device_list(const std::string& text);

// The job config in FILE; InputError naming the file and what is wrong with it.
train::JobConfig read_job_config(const std::string& path);

}  // namespace pw::tools
