#pragma once
// The named choices of a job: schedules, partition methods, optimizers, precisions, update modes...
// Each enum has one table of names (EnumNames<E>), which the JSON form of a JobConfig, the command
// line and the messages all use, so a name is spelled the same everywhere.
#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pipewright/error.h"

namespace pw {

// Specialised for each enum below: `what` names the kind of value ("schedule"), `names` pairs
// every enumerator with its name.
template <typename E>
struct EnumNames;

template <typename E>
std::string_view enum_name(E value) {
  for (const auto& [v, name] : EnumNames<E>::names)
    if (v == value) return name;
  return "?";
}

template <typename E>
std::optional<E> enum_from_name(std::string_view name) {
  for (const auto& [v, n] : EnumNames<E>::names)
    if (n == name) return v;
  return std::nullopt;
}

template <typename E>
std::vector<std::string> enum_names() {
  std::vector<std::string> out;
  for (const auto& entry : EnumNames<E>::names) out.emplace_back(entry.second);
  return out;
}

// "gpipe, 1f1b, interleaved, zb-h1"
template <typename E>
std::string enum_choices() {
  std::string out;
  for (const auto& entry : EnumNames<E>::names) out += (out.empty() ? "" : ", ") + std::string(entry.second);
  return out;
}

// The enumerator called `name`; InputError "unknown schedule 'x'; accepted: gpipe, 1f1b, ..." otherwise.
template <typename E>
E parse_enum(std::string_view name) {
  if (const auto v = enum_from_name<E>(name)) return *v;
  throw InputError("unknown " + std::string(EnumNames<E>::what) + " '" + std::string(name) + "'; accepted: " +
                   enum_choices<E>());
}

}  // namespace pw

namespace pw::pipeline {
enum class ScheduleKind {
  GPipe,
  OneFOneB,
  Interleaved,
  ZeroBubbleH1,
  ZeroBubbleH2,            // zero bubble with twice 1F1B's activation memory
  ZeroBubbleV,             // zero bubble at 1F1B's memory, V placement (two chunks per stage)
  VHalf,                   // V placement, about half of 1F1B's activation memory
  VMin,                    // V placement, about a third of 1F1B's activation memory
  InterleavedZeroBubble,   // interleaved placement with split backwards
  DualPipeV,               // DeepSeek's DualPipe on half the ranks: V placement, overlapped F&B pairs
};
}
namespace pw::partition {
enum class PartitionMethod { Uniform, Params, Profile };
enum class Recompute {
  None,         // keep every layer's Context until its backward
  All,          // keep only the stage input; re-run forward before backward
  ExceptLast,   // every stage but the last recomputes (the last holds one micro-batch anyway)
};
}  // namespace pw::partition
namespace pw::models {
enum class OptimizerKind { Sgd, Adam, Adagrad };
enum class Precision { Fp32, Bf16, Fp16 };
// Where a dense optimizer keeps its state and runs its update: on the parameters' device, or in
// host memory outside the device's cap (ZeRO-Offload; models/host_offload.h).
enum class OptimizerOffload { None, Host };
}  // namespace pw::models
namespace pw::models::data {
enum class Augment { ImageNet, None };   // none: the evaluation transform for training too
// A sample that fails to decode: the job fails naming it, or the next sample that decodes takes its place.
enum class BadSamples { Fail, Skip };
}
namespace pw::dp {
enum class Compression { None, Fp16, Bf16 };                 // gradients on the wire between replicas
enum class UpdateMode { Sync, Async, Bounded };              // how parameter servers apply pushes
enum class SparseOptimizerKind { Sgd = 1, Adagrad = 2, Adam = 3 };   // the values are stored in snapshots
// Which collective a group of CPU tensors (or GPU tensors staged through the host) uses: Gloo's
// own TCP pairs, or the job's links (every message carries the job token); auto: the links when a
// member's address is not loopback, Gloo otherwise (dataparallel/cpu_collectives.h).
enum class CpuCollectives { Auto, Gloo, Links };
// Where a stage's optimizer state lives: every replica holds all of it, or each replica owns its
// 1/R (ZeRO stage 1, Megatron's distributed optimizer; dataparallel/bucket_reducer.h).
enum class OptimizerState { Replicated, Sharded };
}  // namespace pw::dp
namespace pw::train {
enum class CheckpointErrorPolicy { Stop, Continue };   // when a checkpoint cannot be written
// How ranks reach each other: auto is in-process within one process, NCCL between the GPUs of a
// multi-process job, else Thrift.
enum class TransportKind { Auto, InProcess, Thrift, Nccl };
}  // namespace pw::train
namespace pw::pipeline {
// When a step's optimizer update is validated (every rank's loss and gradients finite, the whole
// model's gradient norm within the clip): before it (every stage waits for every rank's figures,
// then updates) or after it (every stage updates at once and undoes the update bit for bit when
// the verdict is to skip or clip: Zero Bubble's post-validation). Auto: after with the zero-bubble
// schedules, before with the others (pipeline/update_check.h).
enum class UpdateValidation { Auto, Before, After };
}  // namespace pw::pipeline

namespace pw {

template <typename E, std::size_t N>
using NameTable = std::array<std::pair<E, std::string_view>, N>;

template <>
struct EnumNames<pipeline::ScheduleKind> {
  static constexpr std::string_view what = "schedule";
  static constexpr NameTable<pipeline::ScheduleKind, 10> names{
      {{pipeline::ScheduleKind::GPipe, "gpipe"},
       {pipeline::ScheduleKind::OneFOneB, "1f1b"},
       {pipeline::ScheduleKind::Interleaved, "interleaved"},
       {pipeline::ScheduleKind::ZeroBubbleH1, "zb-h1"},
       {pipeline::ScheduleKind::ZeroBubbleH2, "zb-h2"},
       {pipeline::ScheduleKind::ZeroBubbleV, "zb-v"},
       {pipeline::ScheduleKind::VHalf, "v-half"},
       {pipeline::ScheduleKind::VMin, "v-min"},
       {pipeline::ScheduleKind::InterleavedZeroBubble, "interleaved-zb"},
       {pipeline::ScheduleKind::DualPipeV, "dualpipev"}}};
};
template <>
struct EnumNames<partition::PartitionMethod> {
  static constexpr std::string_view what = "partition method";
  static constexpr NameTable<partition::PartitionMethod, 3> names{{{partition::PartitionMethod::Uniform, "uniform"},
                                                                   {partition::PartitionMethod::Params, "params"},
                                                                   {partition::PartitionMethod::Profile, "profile"}}};
};
template <>
struct EnumNames<partition::Recompute> {
  static constexpr std::string_view what = "recompute mode";
  static constexpr NameTable<partition::Recompute, 3> names{{{partition::Recompute::None, "none"},
                                                             {partition::Recompute::All, "all"},
                                                             {partition::Recompute::ExceptLast, "except-last"}}};
};
template <>
struct EnumNames<models::OptimizerKind> {
  static constexpr std::string_view what = "optimizer";
  static constexpr NameTable<models::OptimizerKind, 3> names{{{models::OptimizerKind::Sgd, "sgd"},
                                                              {models::OptimizerKind::Adam, "adam"},
                                                              {models::OptimizerKind::Adagrad, "adagrad"}}};
};
template <>
struct EnumNames<models::Precision> {
  static constexpr std::string_view what = "precision";
  static constexpr NameTable<models::Precision, 3> names{{{models::Precision::Fp32, "fp32"},
                                                          {models::Precision::Bf16, "bf16"},
                                                          {models::Precision::Fp16, "fp16"}}};
};
template <>
struct EnumNames<models::OptimizerOffload> {
  static constexpr std::string_view what = "optimizer offload";
  static constexpr NameTable<models::OptimizerOffload, 2> names{
      {{models::OptimizerOffload::None, "none"}, {models::OptimizerOffload::Host, "host"}}};
};
template <>
struct EnumNames<models::data::Augment> {
  static constexpr std::string_view what = "augmentation";
  static constexpr NameTable<models::data::Augment, 2> names{
      {{models::data::Augment::ImageNet, "imagenet"}, {models::data::Augment::None, "none"}}};
};
template <>
struct EnumNames<models::data::BadSamples> {
  static constexpr std::string_view what = "bad-sample policy";
  static constexpr NameTable<models::data::BadSamples, 2> names{
      {{models::data::BadSamples::Fail, "fail"}, {models::data::BadSamples::Skip, "skip"}}};
};
template <>
struct EnumNames<dp::Compression> {
  static constexpr std::string_view what = "gradient compression";
  static constexpr NameTable<dp::Compression, 3> names{
      {{dp::Compression::None, "none"}, {dp::Compression::Fp16, "fp16"}, {dp::Compression::Bf16, "bf16"}}};
};
template <>
struct EnumNames<dp::CpuCollectives> {
  static constexpr std::string_view what = "CPU collectives";
  static constexpr NameTable<dp::CpuCollectives, 3> names{
      {{dp::CpuCollectives::Auto, "auto"}, {dp::CpuCollectives::Gloo, "gloo"}, {dp::CpuCollectives::Links, "links"}}};
};
template <>
struct EnumNames<dp::OptimizerState> {
  static constexpr std::string_view what = "optimizer state";
  static constexpr NameTable<dp::OptimizerState, 2> names{
      {{dp::OptimizerState::Replicated, "replicated"}, {dp::OptimizerState::Sharded, "sharded"}}};
};
template <>
struct EnumNames<dp::UpdateMode> {
  static constexpr std::string_view what = "update mode";
  static constexpr NameTable<dp::UpdateMode, 3> names{
      {{dp::UpdateMode::Sync, "sync"}, {dp::UpdateMode::Async, "async"}, {dp::UpdateMode::Bounded, "bounded"}}};
};
template <>
struct EnumNames<dp::SparseOptimizerKind> {
  static constexpr std::string_view what = "sparse optimizer";
  static constexpr NameTable<dp::SparseOptimizerKind, 3> names{{{dp::SparseOptimizerKind::Sgd, "sgd"},
                                                                {dp::SparseOptimizerKind::Adagrad, "adagrad"},
                                                                {dp::SparseOptimizerKind::Adam, "adam"}}};
};
template <>
struct EnumNames<train::CheckpointErrorPolicy> {
  static constexpr std::string_view what = "checkpoint error policy";
  static constexpr NameTable<train::CheckpointErrorPolicy, 2> names{
      {{train::CheckpointErrorPolicy::Stop, "stop"}, {train::CheckpointErrorPolicy::Continue, "continue"}}};
};
template <>
struct EnumNames<train::TransportKind> {
  static constexpr std::string_view what = "transport";
  static constexpr NameTable<train::TransportKind, 4> names{{{train::TransportKind::Auto, "auto"},
                                                             {train::TransportKind::InProcess, "inprocess"},
                                                             {train::TransportKind::Thrift, "thrift"},
                                                             {train::TransportKind::Nccl, "nccl"}}};
};
template <>
struct EnumNames<pipeline::UpdateValidation> {
  static constexpr std::string_view what = "update validation";
  static constexpr NameTable<pipeline::UpdateValidation, 3> names{{{pipeline::UpdateValidation::Auto, "auto"},
                                                                   {pipeline::UpdateValidation::Before, "before"},
                                                                   {pipeline::UpdateValidation::After, "after"}}};
};

}  // namespace pw
