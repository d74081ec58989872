// The decode table of an FP8 format, for the host loops that decode FP8 codes (the fp8 and
// mxfp8 families): built from codecs::fp8_to_float itself, so it is that function, tabulated.
#pragma once

#include <array>
#include <cstdint>

#include "codecs/fp8/fp8.h"

namespace ccompress::codecs {

template <class F>
const float* fp8_lut() {
  static const std::array<float, 256> lut = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i) t[i] = fp8_to_float<F>(static_cast<uint8_t>(i));
    return t;
  }();
  return lut.data();
}

}  // namespace ccompress::codecs
