#pragma once
// The summary's "bad_samples" (BadSamples::Skip): the samples of this run that would not decode and
// were replaced. Only a pipeline's first stage records them (its last stage decodes too, to learn
// the replacement labels, but records nothing), and each replica of it meets its own rows, so rank 0
// unites the first-stage ranks' logs: each sample counts once, whichever replica, epoch or split
// (training or test) met it, and the count is the same for any replica or stage count.
#include <optional>

#include <nlohmann/json.hpp>

#include "models/data/bad_sample_log.h"
#include "train/engine.h"

namespace pw::train {

inline constexpr std::size_t kBadSamplesNamed = 5;

// Every rank of the job calls it once, after evaluation. The other first-stage ranks hand their
// log to rank 0 and get nullopt; rank 0 gets {"count": N, "first": [up to 5 names, in sample
// order, training samples first]}.
std::optional<nlohmann::json> gather_bad_samples(Engine& engine, const models::data::BadSampleLog& log,
                                                 rpc::Deadline deadline);

}  // namespace pw::train
