#pragma once
// The timeline of a trace as SVG: one row per rank (and one for its all-reduce thread when it
// has one), spans as boxes coloured by micro-batch, forward light and backward dark, waits
// hatched grey, with a legend and a time axis.
#include <string>

#include "train/trace_file.h"

namespace pw::tools {

using train::TraceData;

struct SvgOptions {
  int steps = 2;          // the last N traced steps
  int width = 1400;       // pixels
};

std::string timeline_svg(const TraceData& data, const SvgOptions& options = {});

}  // namespace pw::tools
