// TACO encode / decode kernels: the math of codecs/taco/taco.h in the order of
// codecs/taco/taco.cc, everything in registers, one read and one write per element.
//
// The encoder's layout: a lane holds quads, 4 consecutive elements, so it reads and writes
// them with vector accesses (one 16-byte load of fp32, one 8-byte load of bf16 / fp16, one
// 32-bit word of codes). A warp's item is either
// - a rotation block of 128 elements or more (every group of taco:g128 and up, and the tail
//   blocks of 128 and more): chunk c (128 elements) of the block puts element
//   128 c + 4 l + i in slot 4 c + i of lane l;
// - or a tile of 128 elements (128-aligned) of blocks shorter than 128 (every group of
//   taco:g32 / g64, and the last tail blocks): element 4 l + i of the tile in slot i of lane
//   l. A block of p >= 4 elements spans p / 4 lanes; the blocks of 2 and 1 elements at the
//   end of a run share the last quad (its codes word carries the payload's zero pad).
// Each step is the host's, in its order: the butterflies of distance 1 and 2 inside a quad,
// 4 to 64 across lanes (shuffles), 128 and more across chunks; sum(x^2) in taco_sum_sq's
// order (per virtual lane j mod 32, then the pairwise fold: see sum_squares).
//
// The decode kernel needs no block sums: it has a layout of its own, runs of 8 elements a
// lane (see taco_decode_kernel), with 64-bit loads of codes.
//
// The ring hop is the encode kernel whose load step first decodes the item from the incoming
// wire in the encoder's layout (decode_item) and adds the input to it. In place (hop
// dst = its wire source): a warp reads only its item's codes (whole quads, the zero pad
// included) and (a, s) pairs, and writes only those same bytes; items own disjoint bytes.
// All its reads happen in decode_item, before a __syncwarp that precedes every write.
#include "codecs/taco/taco_kernels.h"

#include "ccompress/error.h"
#include "codecs/fp8/fp8.h"
#include "codecs/registry.h"
#include "codecs/stochastic.h"
#include "codecs/taco/taco.h"
#include "kernels/warp_rotation.cuh"

namespace ccompress::cuda {
namespace {

using codecs::Fp8E4M3;
using codecs::Fp8E5M2;

constexpr int kQuad = 4;
constexpr int kChunk = 32 * kQuad;  // elements of a warp per chunk

// The items of a run: `big` rotation blocks of >= 128 elements (rot::block_at's order, which
// puts the tail's large blocks right after the whole groups), then the 128-element tiles of
// [tile_off, n). group = 2^log2g: the kernels cut the run with shifts and masks (a 64-bit
// division is a subroutine call on the GPU, whose clobbered registers cost spills).
struct Items {
  int64_t n;
  int32_t group, log2g;
  int64_t big, tile_off, count;
};

CC_HOST_DEVICE Items items_of(int64_t n, int32_t group) {
  Items it{n, group, 0, 0, 0, 0};
  while ((int32_t(1) << it.log2g) < group) ++it.log2g;
  if (group >= kChunk) {
    const int64_t tail = n % group;
    it.big = n / group + codecs::popcount64(static_cast<uint64_t>(tail) >> 7);
    it.tile_off = n - (tail & (kChunk - 1));
  }
  it.count = it.big + (n - it.tile_off + kChunk - 1) / kChunk;
  return it;
}

// codecs::scale_groups_before(m, it.group).
__device__ __forceinline__ int64_t groups_before(int64_t m, const Items& it) {
  return (m >> it.log2g) + codecs::popcount64(static_cast<uint64_t>(m & (it.group - 1)));
}

// The rotation block of element j < it.n: a whole group, or one of the tail's descending
// powers of two. Its length; its first element in *off.
__device__ __forceinline__ int32_t block_of(const Items& it, int64_t j, int64_t* off) {
  const int32_t g = it.group;
  const int64_t whole = it.n & ~int64_t(g - 1);
  if (j < whole) {
    *off = j & ~int64_t(g - 1);
    return g;
  }
  const int32_t tail = static_cast<int32_t>(it.n & (g - 1));
  int64_t o = whole;
  for (int32_t p = g >> 1; p > 0; p >>= 1) {
    if (!(tail & p)) continue;
    if (j < o + p) {
      *off = o;
      return p;
    }
    o += p;
  }
  *off = j;
  return 1;  // not reached for j < it.n
}

// What a lane of an item holds: its quad's first element e0 in each chunk 128 c from e0,
// `chunks` chunks; slot 0's block (off0, len0; len0 = 0 past the run); `second`: slot 2 is
// a block of one element of its own (the run ends in blocks of 2 and 1); `valid` quad slots.
struct Lane {
  int64_t e0, off0;
  int len0, chunks, valid;
  bool second;
};

// Slot i's (of a quad) block length.
__device__ __forceinline__ int blen(const Lane& q, int i) {
  return i >= q.valid ? 0 : (q.second && i == 2 ? 1 : q.len0);
}

// The lane's part of item `item`.
__device__ __forceinline__ Lane lane_of(const Items& it, int64_t item) {
  const int lane = threadIdx.x & 31;
  Lane q{};
  if (item < it.big) {
    const codecs::RotBlock blk = rot::block_at(it.n, it.group, it.log2g, item);
    q.e0 = blk.off + kQuad * lane;
    q.off0 = blk.off;
    q.len0 = blk.len;
    q.chunks = blk.len / kChunk;
    q.valid = kQuad;
    q.second = false;
    return q;
  }
  // tile_off is a multiple of 128: (item - big + tile_off / 128) * 128 + 4 l, written so that
  // no 64-bit part of it is loop-invariant (hoisted out of the kernel's loop, it would be one
  // more register live across the divisions' slow-path calls)
  q.e0 = ((item - it.big + (it.tile_off >> 7)) << 7) | (kQuad * lane);
  q.chunks = 1;
  const int64_t left = it.n - q.e0;
  q.valid = left <= 0 ? 0 : (left < kQuad ? static_cast<int>(left) : kQuad);
  if (q.valid == 0) return q;
  q.len0 = block_of(it, q.e0, &q.off0);
  q.second = q.len0 == 2 && q.valid == 3;
  return q;
}

// Distance-m butterflies (m = 1, 2) inside every quad of the first `chunks` chunks, where
// the pair lies in one block: the lower element a + b, the upper a + (-b), as on the host.
template <int kSlots>
__device__ __forceinline__ void quad_stage(float (&v)[kSlots], const Lane& q, int m) {
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    if ((k & m) || k / kQuad >= q.chunks || m >= blen(q, k % kQuad)) continue;
    const float a = v[k], b = v[k | m];
    v[k] = __fadd_rn(a, b);
    v[k | m] = __fadd_rn(a, -b);
  }
}

// v <- WHT(v) / sqrt(p) per block, the stages of codecs::fwht in its order.
template <int kSlots>
__device__ __forceinline__ void wht(float (&v)[kSlots], const Lane& q) {
  const int lane = threadIdx.x & 31;
  quad_stage(v, q, 1);
  quad_stage(v, q, 2);
  const int span = q.len0 >= kQuad ? q.len0 : 0;  // lanes take part in blocks of 4 and more
  for (int d = kQuad; d < kChunk; d <<= 1) {        // warp-uniform: every lane shuffles
    const bool upper = (lane & (d / kQuad)) != 0;
#pragma unroll
    for (int k = 0; k < kSlots; ++k) {
      if (k / kQuad >= q.chunks) continue;  // warp-uniform
      const float o = __shfl_xor_sync(rot::kFullMask, v[k], d / kQuad);
      if (d < span) v[k] = upper ? __fadd_rn(o, -v[k]) : __fadd_rn(v[k], o);
    }
  }
  rot::butterfly_in_registers(v, kQuad, kQuad * q.chunks);
  const float norm = codecs::wht_norm(q.len0);
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    if (k / kQuad < q.chunks) v[k] = __fmul_rn(v[k], q.second && k == 2 ? 1.0f : norm);
  }
}

// Per quad slot i (0..3), the value of its block folded with op over the lanes of the
// block (x: a value per quad slot, already combined over this lane's chunks): the lane
// stages d = 32 .. 4 (element distance), then 2 and 1 inside the quad. For sum(x^2) of a
// block of p <= 64 this is taco_sum_sq's order: element j in virtual lane j mod min(32, p),
// for p = 64 the two rows added first (lane ^ 8), then the pairwise fold.
template <class Op>
__device__ __forceinline__ void fold_quad(float (&x)[kQuad], const Lane& q, Op op) {
  const int span = q.len0 >= kQuad ? q.len0 : 0;
  for (int d = kChunk / 4; d >= kQuad; d >>= 1) {
#pragma unroll
    for (int i = 0; i < kQuad; ++i) {
      const float o = __shfl_xor_sync(rot::kFullMask, x[i], d / kQuad);
      if (d < span) x[i] = op(x[i], o);
    }
  }
#pragma unroll
  for (int m = 2; m > 0; m >>= 1) {
    float y[kQuad];
#pragma unroll
    for (int i = 0; i < kQuad; ++i) y[i] = m < blen(q, i) ? op(x[i & ~m], x[i | m]) : x[i];
#pragma unroll
    for (int i = 0; i < kQuad; ++i) x[i] = y[i];
  }
}

// sum(v^2) of this lane's block in taco_sum_sq's order; a block of 2 and 1 at the run's end:
// slot 2's in *second.
template <int kSlots>
__device__ __forceinline__ float sum_squares(const float (&v)[kSlots], const Lane& q,
                                             float* second) {
  if (q.len0 < kChunk) {  // a tile: one chunk, blocks of at most 64 elements
    float s[kQuad];
#pragma unroll
    for (int i = 0; i < kQuad; ++i) s[i] = i < q.valid ? __fmul_rn(v[i], v[i]) : 0.0f;
    fold_quad(s, q, [](float a, float b) { return __fadd_rn(a, b); });
    *second = s[2];
    return s[0];
  }
  // A block of 128 c elements: element j = 128 c + 4 l + i is in virtual lane j mod 32 =
  // 4 (l mod 8) + i, row j / 32 = 4 c + l / 8. Per chunk, transpose the 4 x 4 squares of
  // lanes l mod 8 + 8 r (r = 0..3) so that lane 8 g + h holds virtual lane 4 h + g, rows
  // 4 c .. 4 c + 3 in slots 0..3, and add them to the lane's sum in that order (a chunk at a
  // time: few registers live); then fold the virtual lanes.
  const int lane = threadIdx.x & 31;
  float ss = 0.0f;
#pragma unroll
  for (int c = 0; c < kSlots / kQuad; ++c) {
    if (c >= q.chunks) continue;  // warp-uniform
    float x[kQuad];
#pragma unroll
    for (int i = 0; i < kQuad; ++i) x[i] = __fmul_rn(v[kQuad * c + i], v[kQuad * c + i]);
#pragma unroll
    for (int b = 1; b >= 0; --b) {  // lane bit 3 + b <-> slot bit b
      const int m = 1 << b;
      const bool upper = (lane & (8 << b)) != 0;
#pragma unroll
      for (int i = 0; i < kQuad; ++i) {
        if (i & m) continue;
        const float send = upper ? x[i] : x[i | m];
        const float recv = __shfl_xor_sync(rot::kFullMask, send, 8 << b);
        if (upper) {
          x[i] = recv;
        } else {
          x[i | m] = recv;
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kQuad; ++i) ss = c == 0 && i == 0 ? x[0] : __fadd_rn(ss, x[i]);
  }
  // lanes[v] += lanes[v + off], off = 16, 8, 4 (lane bits 2, 1, 0), 2, 1 (lane bits 4, 3)
  constexpr int kFold[5] = {4, 2, 1, 16, 8};
#pragma unroll
  for (int f = 0; f < 5; ++f) ss = __fadd_rn(ss, __shfl_xor_sync(rot::kFullMask, ss, kFold[f]));
  *second = 0.0f;
  return ss;
}

// The largest raw |v| bits of this lane's block (>= Inf's: a non-finite one); slot 2's
// one-element block in *second.
template <int kSlots>
__device__ __forceinline__ int32_t block_amax(const float (&v)[kSlots], const Lane& q,
                                              int32_t* second) {
  int32_t m = 0;
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    const int i = k % kQuad;
    if (k / kQuad < q.chunks && i < q.valid && !(q.second && i == 2))
      m = max(m, static_cast<int32_t>(codecs::f32_bits(v[k]) & codecs::kF32AbsMask));
  }
  *second = q.second ? static_cast<int32_t>(codecs::f32_bits(v[2]) & codecs::kF32AbsMask) : 0;
  const int span = q.len0 >= kQuad ? q.len0 : 0;
  for (int d = kQuad; d < kChunk; d <<= 1) {
    const int32_t o = __shfl_xor_sync(rot::kFullMask, m, d / kQuad);
    if (d < span) m = max(m, o);
  }
  return m;
}

// A block's (a, s) pair as the wire stores it.
struct Pair {
  float a, s;
};

// v <- the decoded item of the wire buffer src (pairs: its (a, s) section): each code times
// s, the inverse rotation, then / a.
template <class F, int kSlots>
__device__ __forceinline__ void decode_item(const uint8_t* src, const float* pairs,
                                            const Items& it, const Lane& q, float (&v)[kSlots]) {
  Pair p0{1.0f, 0.0f}, p1{1.0f, 0.0f};
  if (q.valid > 0) {
    const int64_t g0 = groups_before(q.off0, it);
    p0 = Pair{pairs[2 * g0], pairs[2 * g0 + 1]};
    if (q.second) p1 = Pair{pairs[2 * g0 + 2], pairs[2 * g0 + 3]};
  }
#pragma unroll
  for (int c = 0; c < kSlots / kQuad; ++c) {
    uint32_t w = 0;
    if (c < q.chunks && q.valid > 0)
      w = *reinterpret_cast<const uint32_t*>(src + q.e0 + int64_t(kChunk) * c);
#pragma unroll
    for (int i = 0; i < kQuad; ++i) {
      const float s = q.second && i == 2 ? p1.s : p0.s;
      v[kQuad * c + i] =
          i < q.valid ? __fmul_rn(codecs::fp8_to_float<F>(static_cast<uint8_t>(w >> (8 * i))), s)
                      : 0.0f;
    }
  }
  wht(v, q);
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    const int i = k % kQuad;
    if (k / kQuad < q.chunks && i < q.valid)
      v[k] = codecs::div_rn(v[k], q.second && i == 2 ? p1.a : p0.a);
  }
}

// v[k] <- float(src[e]) / divisor for the lane's elements, one vector load a quad where src
// is 16-byte aligned (@p vec) and the quad whole. With @p add (the hop, v holding a decoded
// item) the value is v[k] + float(src) in that order, before the division (the CPU's decode,
// add, encode).
template <int kSlots>
__device__ __forceinline__ void load_item(const void* src, DType t, const Lane& q, float divisor,
                                          bool vec, bool add, float (&v)[kSlots]) {
#pragma unroll
  for (int c = 0; c < kSlots / kQuad; ++c) {
    if (c >= q.chunks) {  // a tile of a kernel for larger groups: chunk 0 only
#pragma unroll
      for (int i = 0; i < kQuad; ++i) v[kQuad * c + i] = 0.0f;
      continue;
    }
    const int64_t e = q.e0 + int64_t(kChunk) * c;
    float x[kQuad] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (vec && q.valid == kQuad) {
      rot::load4_any(src, t, e, x);
    } else {
#pragma unroll
      for (int i = 0; i < kQuad; ++i)
        if (i < q.valid) x[i] = codecs::load_as_float(src, t, e + i);
    }
#pragma unroll
    for (int i = 0; i < kQuad; ++i) {
      float y = x[i];
      if (add && i < q.valid) y = codecs::add_rn(v[kQuad * c + i], y);
      v[kQuad * c + i] = divisor != 1.0f ? codecs::div_rn(y, divisor) : y;
    }
  }
}

// The RMS pre-scale a of a block of len elements (len 0: a lane past the run, whose value
// nothing uses).
template <class F>
__device__ __forceinline__ float prescale(float ss, int len) {
  return codecs::taco_prescale<F>(ss, len > 0 ? len : 1);
}

// dst <- encode(src / divisor); kHop: dst <- encode((decode(wire) + src) / divisor), wire
// possibly dst itself (see the file comment), hence no __restrict__ on dst and pairs.
template <class F, int kSlots, bool kHop>
__global__ void __launch_bounds__(rot::kThreads)
    taco_encode_kernel(const void* __restrict__ src, DType src_dtype, const uint8_t* wire,
                       Items it, float divisor, EncodeContext ctx, bool stochastic, bool vec,
                       uint8_t* dst, float* pairs) {
  for (int64_t item = rot::global_warp(); item < it.count; item += rot::grid_warps()) {
    const Lane q = lane_of(it, item);
    float v[kSlots];
    if constexpr (kHop) {
      decode_item<F>(wire, reinterpret_cast<const float*>(wire + codecs::rot_scales_offset(it.n)),
                     it, q, v);
      __syncwarp();  // in place: the item's bytes are all read before any lane writes one
    }
    load_item(src, src_dtype, q, divisor, vec, kHop, v);
    float ss1 = 0.0f;
    const float ss0 = sum_squares(v, q, &ss1);
    const float a0 = prescale<F>(ss0, q.len0);
    const float a1 = q.second ? prescale<F>(ss1, 1) : 1.0f;
#pragma unroll
    for (int k = 0; k < kSlots; ++k) v[k] = __fmul_rn(q.second && k == 2 ? a1 : a0, v[k]);
    wht(v, q);
    int32_t m1 = 0;
    const int32_t m0 = block_amax(v, q, &m1);
    const bool bad0 = m0 >= static_cast<int32_t>(codecs::kF32InfBits);
    const bool bad1 = m1 >= static_cast<int32_t>(codecs::kF32InfBits);
    const float s0 = bad0 ? codecs::taco_nan() : codecs::taco_scale<F>(m0);
    const float s1 = bad1 ? codecs::taco_nan() : q.second ? codecs::taco_scale<F>(m1) : 1.0f;
    if (q.valid == 0) continue;
    // Here, not at the start: fewer registers live across the divisions above.
    const uint64_t prefix = stochastic ? codecs::sr_prefix(ctx.seed, ctx.step, ctx.rank) : 0;
#pragma unroll
    for (int c = 0; c < kSlots / kQuad; ++c) {
      if (c >= q.chunks) continue;
      const int64_t e = q.e0 + int64_t(kChunk) * c;
      uint32_t word = 0;  // zeros past the run: the payload's pad
#pragma unroll
      for (int i = 0; i < kQuad; ++i) {
        const bool one = q.second && i == 2;
        if (i >= q.valid || (one ? bad1 : bad0)) continue;
        const float t = codecs::div_rn(v[kQuad * c + i], one ? s1 : s0);
        const uint32_t code = stochastic ? codecs::fp8_from_float_sr<F>(
                                               t, codecs::sr_uniform_at(prefix, ctx.index + e + i))
                                         : codecs::fp8_from_float<F>(t);
        word |= code << (8 * i);
      }
      *reinterpret_cast<uint32_t*>(dst + e) = word;
    }
    if (q.e0 == q.off0) {  // the lane holding the block's first element writes its pair(s)
      const int64_t g0 = groups_before(q.off0, it);
      pairs[2 * g0] = bad0 ? codecs::taco_nan() : a0;
      pairs[2 * g0 + 1] = s0;
      if (q.second) {
        pairs[2 * g0 + 2] = bad1 ? codecs::taco_nan() : a1;
        pairs[2 * g0 + 3] = s1;
      }
    }
  }
}

// ---- the decode kernel: runs of 8 elements a lane ----
// A decode needs no block sums, so it has a layout of its own, in which a lane holds runs of
// kRun = 8 consecutive elements: it reads their codes as one 64-bit word and writes their
// values with 16-byte stores. A warp's item is kSpans spans of kSpan = 256 elements,
// max(256, group) elements from a multiple of that, so every rotation block lies in one item
// (a tail block too: it starts at a multiple of its length): element 256 c + 8 l + i of the
// item is slot 8 c + i of lane l. The butterflies of distance 1, 2 and 4 pair slots of a
// lane, 8 to 128 lanes (shuffles), 256 the slots 8 apart; an element's partner at distance d
// is in its block iff d is below the block's length.
constexpr int kRun = 8;
constexpr int kSpan = 32 * kRun;

// v <- the unnormalised WHT of each block, the stages of codecs::fwht in its order (the lower
// element a + b, the upper a + (-b)); len(k): the length of slot k's block (<= group).
template <int kSlots, class Len>
__device__ __forceinline__ void wht_runs(float (&v)[kSlots], int32_t group, Len len) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int m = 1; m < kRun; m <<= 1) {
#pragma unroll
    for (int k = 0; k < kSlots; ++k) {
      if ((k & m) || m >= len(k)) continue;
      const float a = v[k], b = v[k | m];
      v[k] = __fadd_rn(a, b);
      v[k | m] = __fadd_rn(a, -b);
    }
  }
  for (int d = kRun; d < kSpan && d < group; d <<= 1) {  // warp-uniform: every lane shuffles
    const bool upper = (lane & (d / kRun)) != 0;
#pragma unroll
    for (int k = 0; k < kSlots; ++k) {
      const float o = __shfl_xor_sync(rot::kFullMask, v[k], d / kRun);
      if (d < len(k)) v[k] = upper ? __fadd_rn(o, -v[k]) : __fadd_rn(v[k], o);
    }
  }
#pragma unroll
  for (int m = kRun; m < kSlots; m <<= 1) {
#pragma unroll
    for (int k = 0; k < kSlots; ++k) {
      if ((k & m) || m / kRun * kSpan >= len(k)) continue;
      const float a = v[k], b = v[k | m];
      v[k] = __fadd_rn(a, b);
      v[k | m] = __fadd_rn(a, -b);
    }
  }
}

__device__ __forceinline__ int run_len(int64_t n, int64_t j) {
  return static_cast<int>(max(int64_t(0), min(int64_t(kRun), n - j)));
}

// The decode's destination <- decode(src), as codecs/taco/taco.cc's decode_run: each code
// times its block's s, the normalised inverse rotation, then / a. @p vec_codes: src 8-byte
// aligned; @p vec_out: the destination 16-byte aligned.
template <class F, int kSpans, bool kCast>
__global__ void __launch_bounds__(rot::kThreads)
    taco_decode_kernel(const uint8_t* __restrict__ src, Items it,
                       const float* __restrict__ pairs, DecodeOut o, bool vec_codes,
                       bool vec_out) {
  constexpr int kSlots = kRun * kSpans;
  constexpr int64_t kItem = int64_t(kSpan) * kSpans;
  const int64_t whole = it.n & ~int64_t(it.group - 1);
  // j0: slot 0's element, the only 64-bit value the loop carries (the item is j0's multiple
  // of kItem)
  for (int64_t j0 = rot::global_warp() * kItem + kRun * (threadIdx.x & 31);
       j0 - kRun * (threadIdx.x & 31) < it.n; j0 += rot::grid_warps() * kItem) {
    const int64_t item_end = (j0 & ~(kItem - 1)) + kItem;
    uint32_t w[2 * kSpans];  // the codes, 4 a word
#pragma unroll
    for (int c = 0; c < kSpans; ++c) {
      const int64_t j = j0 + int64_t(kSpan) * c;
      const int len = run_len(it.n, j);
      if (vec_codes && len == kRun) {
        const uint2 r = *reinterpret_cast<const uint2*>(src + j);
        w[2 * c] = r.x;
        w[2 * c + 1] = r.y;
      } else {
        w[2 * c] = w[2 * c + 1] = 0;
#pragma unroll
        for (int i = 0; i < kRun; ++i)
          if (i < len) w[2 * c + i / 4] |= uint32_t(src[j + i]) << (8 * (i % 4));
      }
    }
    float v[kSlots];
    const auto code = [&](int k) {
      return codecs::fp8_to_float<F>(static_cast<uint8_t>(w[k / 4] >> (8 * (k % 4))));
    };
    if (item_end <= whole) {  // warp-uniform: whole blocks of the group only
      float a[kSpans];
#pragma unroll
      for (int c = 0; c < kSpans; ++c) {
        const int64_t g = (j0 + int64_t(kSpan) * c) >> it.log2g;  // the lane's block, its pair
        a[c] = pairs[2 * g];
        const float s = pairs[2 * g + 1];
#pragma unroll
        for (int i = 0; i < kRun; ++i) v[kRun * c + i] = __fmul_rn(code(kRun * c + i), s);
      }
      wht_runs(v, it.group, [&](int) { return it.group; });
      const float norm = codecs::wht_norm(it.group);
#pragma unroll
      for (int k = 0; k < kSlots; ++k) v[k] = codecs::div_rn(__fmul_rn(v[k], norm), a[k / kRun]);
    } else {  // the run's last item: the tail's blocks, elements past the run
      // Per slot, the log2 of its block's length in 4 bits (1 past the run: no butterfly),
      // and its pair read again for a after the rotation: few registers live across it.
      uint64_t lens = 0;
#pragma unroll
      for (int k = 0; k < kSlots; ++k) {
        const int64_t j = j0 + int64_t(kSpan) * (k / kRun) + k % kRun;
        v[k] = 0.0f;
        if (j < it.n) {
          int64_t off = 0;
          const int32_t len = block_of(it, j, &off);
          lens |= uint64_t(codecs::popcount64(uint64_t(len) - 1)) << (4 * k);
          v[k] = __fmul_rn(code(k), pairs[2 * groups_before(off, it) + 1]);
        }
      }
      const auto len = [&](int k) { return int32_t(1) << ((lens >> (4 * k)) & 15); };
      wht_runs(v, it.group, len);
#pragma unroll
      for (int k = 0; k < kSlots; ++k) {
        const int64_t j = j0 + int64_t(kSpan) * (k / kRun) + k % kRun;
        if (j >= it.n) continue;
        int64_t off = 0;
        block_of(it, j, &off);
        v[k] = codecs::div_rn(__fmul_rn(v[k], codecs::wht_norm(len(k))),
                              pairs[2 * groups_before(off, it)]);
      }
    }
#pragma unroll
    for (int c = 0; c < kSpans; ++c) {
      const int64_t j = j0 + int64_t(kSpan) * c;
      const int len = run_len(it.n, j);
      float r[kRun];
#pragma unroll
      for (int i = 0; i < kRun; ++i) r[i] = v[kRun * c + i];
      if (vec_out && len == kRun) {
        store_decoded8<kCast>(o, j, r);
      } else {
#pragma unroll
        for (int i = 0; i < kRun; ++i)
          if (i < len) store_decoded<kCast>(o, j + i, r[i]);
      }
    }
  }
}

void check_taco(const Codec& codec, int64_t n) {
  CC_CHECK(codec.group >= 32 && codec.group <= 512 && (codec.group & (codec.group - 1)) == 0,
           "taco group " << codec.group << " is not a power of two in 32..512");
  CC_CHECK(n >= 0, "element count " << n << " is negative");
}

template <class Fn>
void with_format(const Codec& codec, Fn fn) {
  if (codec.fp8_format == 0) {
    fn(Fp8E4M3{});
  } else {
    fn(Fp8E5M2{});
  }
}

// Runs fn(std::integral_constant<int, kSlots>) with a lane's slots for groups of g: a quad
// per 128-element chunk of a group.
template <class Fn>
void with_quads(int32_t g, Fn fn) {
  if (g <= kChunk) {
    fn(std::integral_constant<int, kQuad>{});
  } else if (g == 2 * kChunk) {
    fn(std::integral_constant<int, 2 * kQuad>{});
  } else {
    fn(std::integral_constant<int, 4 * kQuad>{});
  }
}

bool aligned(const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

}  // namespace

void launch_taco_encode(const void* src, DType src_dtype, const void* wire_in, int64_t n,
                        const Codec& codec, float divisor, const EncodeContext& ctx, void* dst,
                        cudaStream_t stream) {
  const char* what = wire_in != nullptr ? "taco decode_reduce_encode" : "taco encode";
  check_taco(codec, n);
  if (n == 0) return;
  CC_CHECK(aligned(dst, 4) && aligned(wire_in, 4), "wire buffers must be 4-byte aligned");
  uint8_t* wire = static_cast<uint8_t*>(dst);
  float* pairs = reinterpret_cast<float*>(wire + codecs::rot_scales_offset(n));
  const uint8_t* in = static_cast<const uint8_t*>(wire_in);
  const Items it = items_of(n, codec.group);
  const int64_t work = ceil_div(it.count, rot::kWarps);
  const bool vec = aligned(src, 16);
  with_format(codec, [&](auto fmt) {
    with_quads(codec.group, [&](auto slots) {
      with_flag(in != nullptr, [&](auto hop) {
        auto kernel =
            taco_encode_kernel<decltype(fmt), decltype(slots)::value, decltype(hop)::value>;
        kernel<<<occupancy_grid(kernel, rot::kThreads, work), rot::kThreads, 0, stream>>>(
            src, src_dtype, in, it, divisor, ctx, codec.stochastic, vec, wire, pairs);
      });
    });
  });
  CC_CUDA_CHECK_LAUNCH(what);
}

void launch_taco_decode(const void* src, int64_t n, const Codec& codec, const DecodeOut& o,
                        cudaStream_t stream) {
  const char* what = o.out != nullptr ? "taco decode" : "taco decode_accumulate";
  check_taco(codec, n);
  if (n == 0) return;
  CC_CHECK(aligned(src, 4), "wire buffer must be 4-byte aligned");
  const uint8_t* wire = static_cast<const uint8_t*>(src);
  const float* pairs = reinterpret_cast<const float*>(wire + codecs::rot_scales_offset(n));
  const Items it = items_of(n, codec.group);
  with_format(codec, [&](auto fmt) {
    with_flag(o.out != nullptr, [&](auto cast) {
      auto go = [&](auto spans) {  // an item: max(256, group) elements
        constexpr int kSpans = decltype(spans)::value;
        auto kernel = taco_decode_kernel<decltype(fmt), kSpans, decltype(cast)::value>;
        const int64_t work = ceil_div(ceil_div(n, int64_t(kSpan) * kSpans), rot::kWarps);
        kernel<<<occupancy_grid(kernel, rot::kThreads, work), rot::kThreads, 0, stream>>>(
            wire, it, pairs, o, aligned(src, 8), decode_out_aligned16(o));
      };
      if (codec.group > kSpan) {
        go(std::integral_constant<int, 2>{});
      } else {
        go(std::integral_constant<int, 1>{});
      }
    });
  });
  CC_CUDA_CHECK_LAUNCH(what);
}

namespace {

constexpr DeviceOps kDeviceOps = {launch_taco_encode, launch_taco_decode};
[[maybe_unused]] const bool kAttached = attach_device_ops("taco", kDeviceOps);

}  // namespace

}  // namespace ccompress::cuda
