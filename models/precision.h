#pragma once
// Mixed precision (torch.autocast / DeepSpeed bf16 and fp16): the dtype activations and their
// gradients are stored and sent in, and convolutions and matrix products computed in. Parameters,
// their gradients, optimizer state, batch-norm statistics and losses stay F32 in every mode.
#include <string>

#include "pipewright/enums.h"
#include "kernels/device.h"

namespace pw::models {

// Precision and its names: pipewright/enums.h.

// "fp32", "bf16" or "fp16"; InputError naming the accepted values otherwise.
Precision parse_precision(const std::string& text);
const char* precision_name(Precision p);
// F32, BF16 or F16.
kernels::DType activation_dtype(Precision p);

}  // namespace pw::models
