#pragma once
// The text form of an image data set's normalisation (Normalization, pipewright/dataset.h):
// "MEAN,...:STD,..." with one value each (for every channel, as for grey images) or three (R, G, B).
#include <string>

#include "pipewright/dataset.h"

namespace pw::models::data {

// "0.485,0.456,0.406:0.229,0.224,0.225" or "0.5:0.25"; anything else (another count, a value that
// is not a number, a std <= 0) is a one-line InputError saying what is accepted.
Normalization parse_normalization(const std::string& text);

// The form parse_normalization reads, each value as the shortest text that reads back the same
// float; one value a side when the three channels agree.
std::string normalization_text(const Normalization& normalization);

// InputError unless every mean is finite and every std finite and > 0 (for a Normalization made in code).
void check_normalization(const Normalization& normalization);

}  // namespace pw::models::data
