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

// hadamard.h's butterflies, stage by stage from stage Len on, over a batch of whole blocks of
// H (len a multiple of H) with the stage length known at compile time, so the compiler
// vectorizes them (SSE2 in the baseline copy). Every butterfly has the same operands as in
// fwht(), hence the same bits.
template <int H, int Len>
inline void fwht_stages(float* v, int64_t len) {
  for (int64_t i = 0; i < len; i += 2 * Len)
    for (int j = 0; j < Len; ++j) {
      float a = v[i + j], b = v[i + j + Len];
      v[i + j] = codecs::add_rn(a, b);
      v[i + j + Len] = codecs::add_rn(a, -b);
    }
  if constexpr (2 * Len < H) fwht_stages<H, 2 * Len>(v, len);
}

// wht_normalized_fast for a block size known at compile time: the long stages' loops have
// fixed lengths (no runtime trip counts per stage and block).
template <int H>
inline void wht_normalized_fixed(float* v) {
  for (int32_t i = 0; i < H; i += 8) wht8(v + i);
  if constexpr (H > 8) fwht_stages<H, 8>(v, H);
  const float s = codecs::wht_norm(H);
  for (int32_t i = 0; i < H; ++i) v[i] = v[i] * s;
}

inline void wht_normalized_fast(float* v, int32_t h) {
  switch (h) {  // the rotation sizes of the codecs' defaults (taco:g128, hint8:h128) and near
    case 32: return wht_normalized_fixed<32>(v);
    case 64: return wht_normalized_fixed<64>(v);
    case 128: return wht_normalized_fixed<128>(v);
    case 256: return wht_normalized_fixed<256>(v);
    default: break;
  }
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
