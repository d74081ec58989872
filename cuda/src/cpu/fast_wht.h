// A host-only normalised Walsh-Hadamard transform bit-identical with codecs::wht_normalized
// (hadamard.h) and about three times faster: every stage still forms the same a + b and
// a + (-b) from the same operands, but the three short stages (len 1, 2, 4) run fused on
// eight values in registers, and the long ones in fixed-stride loops the compiler vectorizes.
#pragma once

#include <cstdint>

#include "codecs/hadamard.h"

namespace ccompress::cpu {

inline void wht8(float* p) {
  float a[8], b[8];
  for (int i = 0; i < 8; i += 2) {  // len 1
    a[i] = p[i] + p[i + 1];
    a[i + 1] = p[i] + -p[i + 1];
  }
  for (int i = 0; i < 8; i += 4) {  // len 2
    for (int j = 0; j < 2; ++j) {
      b[i + j] = a[i + j] + a[i + j + 2];
      b[i + j + 2] = a[i + j] + -a[i + j + 2];
    }
  }
  for (int j = 0; j < 4; ++j) {  // len 4
    p[j] = b[j] + b[j + 4];
    p[j + 4] = b[j] + -b[j + 4];
  }
}

inline void wht_normalized_fast(float* v, int32_t h) {
  if (h < 8) {
    codecs::wht_normalized(v, h);
    return;
  }
  for (int32_t i = 0; i < h; i += 8) wht8(v + i);
  for (int32_t len = 8; len < h; len <<= 1) {
    for (int32_t i = 0; i < h; i += len << 1) {
      float* lo = v + i;
      float* hi = lo + len;
      for (int32_t j = 0; j < len; ++j) {
        float a = lo[j], b = hi[j];
        lo[j] = a + b;
        hi[j] = a + -b;
      }
    }
  }
  const float s = codecs::wht_norm(h);
  for (int32_t i = 0; i < h; ++i) v[i] = v[i] * s;
}

}  // namespace ccompress::cpu
