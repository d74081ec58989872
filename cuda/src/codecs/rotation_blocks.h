// How the Hadamard-rotated families (taco.h, hint8.h) cut a run of n elements into
// power-of-two rotation blocks and scale groups.
//
// A run is floor(n / h) full blocks of h elements, then the tail L = n mod h cut into the
// powers of two of its binary expansion, largest first (L = 100, h = 128: blocks of 64, 32
// and 4). Every block is a valid Walsh-Hadamard size, nothing is padded, so the payload is
// exactly n codes whatever n is; the price is that the tail's blocks are rotated over fewer
// elements. (Zero-padding the tail to h would send up to h - 1 extra codes per run.)
//
// Scale groups of g elements (g a power of two dividing h) tile each block; a block shorter
// than g is one group. So the groups before element m (m a block boundary, or n) number
//   groups(m) = floor(m / g) + popcount(m mod g),
// which is also the index of the first group of the block that starts at m.
#pragma once

#include <cstdint>

#include "ccompress/common.h"

namespace ccompress::codecs {

CC_HOST_DEVICE int popcount64(uint64_t v) {
#if defined(__CUDA_ARCH__)
  return __popcll(v);
#else
  return __builtin_popcountll(v);
#endif
}

/// One rotation block of a run: its first element and its length (a power of two).
struct RotBlock {
  int64_t off;
  int32_t len;
};

/// Rotation blocks of a run of n elements with rotation size h.
CC_HOST_DEVICE int64_t rot_block_count(int64_t n, int32_t h) {
  return n / h + popcount64(static_cast<uint64_t>(n % h));
}

/// Block b (< rot_block_count(n, h)) of a run.
CC_HOST_DEVICE RotBlock rot_block(int64_t n, int32_t h, int64_t b) {
  const int64_t full = n / h;
  if (b < full) return RotBlock{b * h, h};
  const int32_t tail = static_cast<int32_t>(n % h);
  int64_t off = full * h;
  int64_t t = b - full;
  for (int32_t p = h >> 1; p > 0; p >>= 1) {
    if (!(tail & p)) continue;
    if (t == 0) return RotBlock{off, p};
    off += p;
    --t;
  }
  return RotBlock{off, 0};  // b out of range
}

/// Scale groups of g elements before element m of a run (see the file comment).
CC_HOST_DEVICE int64_t scale_groups_before(int64_t m, int32_t g) {
  return m / g + popcount64(static_cast<uint64_t>(m % g));
}

/// Byte offset of the scale section: the payload of n one-byte codes, padded to 4.
CC_HOST_DEVICE int64_t rot_scales_offset(int64_t n) { return (n + 3) & ~int64_t(3); }

}  // namespace ccompress::codecs
