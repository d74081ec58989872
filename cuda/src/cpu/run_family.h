// The host loops of a family that encodes whole runs of fp32 values (taco, hint8, nvfp4,
// hint4): KernelBackend's codec calls built from the family's run encode and decode. Input of
// another dtype, or a divisor, goes through the per-thread run buffer first; a run is its
// pieces (Codec::run_block) encoded one after the other.
//
// A family defines, in its own translation unit (anonymous namespace):
//   int64_t wire_bytes(const Codec& c, int64_t n);      // one piece
//   void encode_body(const float* x, int64_t n, const Codec& c, const EncodeContext& ctx,
//                    uint8_t* dst, const NextPiece& next);  // host_loops.h
//   void decode_body(const uint8_t* src, int64_t n, const Codec& c, float* out,
//                    bool accumulate);  // out = value, or with accumulate out += value
// then CC_CPU_RUN_FAMILY_HOST_OPS(kHostOps), which defines `const HostOps kHostOps` whose
// entry points are compiled for AVX2 and for the baseline (cpu/isa_dispatch.h) with the
// family's loops inlined into each copy.
#pragma once

#include "ccompress/codec.h"
#include "ccompress/kernel_backend.h"
#include "codecs/registry.h"
#include "cpu/host_loops.h"
#include "cpu/isa_dispatch.h"

namespace ccompress::cpu {

template <class F>
inline void run_encode_pieces(const float* x, int64_t n, const Codec& c,
                              const EncodeContext& ctx, uint8_t* dst) {
  for_each_piece(c, n, [&](int64_t off, int64_t len) {
    EncodeContext at = ctx;
    at.index += off;
    const int64_t next = std::min(len, n - off - len);  // the next piece is at most as long
    F::encode(x + off, len, c, at, dst, NextPiece{next > 0 ? x + off + len : nullptr, next});
    dst += F::piece_bytes(c, len);
  });
}

// With @p accumulate, out += the decoded values (codecs::add_rn(out, value)), else out = them.
template <class F>
inline void run_decode_pieces(const uint8_t* src, int64_t n, const Codec& c, float* out,
                              bool accumulate) {
  for_each_piece(c, n, [&](int64_t off, int64_t len) {
    F::decode(src, len, c, out + off, accumulate);
    src += F::piece_bytes(c, len);
  });
}

template <class F>
inline void run_encode(const void* src, DType src_dtype, int64_t n, const Codec& c,
                       float divisor, const EncodeContext& ctx, void* dst) {
  // Families read fp32: other input is converted (and divided) into the run buffer first.
  const float* run = static_cast<const float*>(src);
  if (src_dtype != DType::Float32 || divisor != 1.0f) {
    float* buf = run_scratch(n);
    load_block(src, src_dtype, 0, n, divisor, buf);
    run = buf;
  }
  run_encode_pieces<F>(run, n, c, ctx, static_cast<uint8_t*>(dst));
}

template <class F>
inline void run_decode_accumulate(const void* src, int64_t n, const Codec& c, float* acc,
                                  bool assign) {
  const uint8_t* wire = static_cast<const uint8_t*>(src);
  if (disjoint(wire, c.wire_bytes(n), acc, n * 4)) {
    run_decode_pieces<F>(wire, n, c, acc, !assign);  // straight into the accumulator
    return;
  }
  float* run = run_scratch(n);
  run_decode_pieces<F>(wire, n, c, run, false);
  load_accumulate_body(run, DType::Float32, n, acc, assign);
}

template <class F>
inline void run_decode(const void* src, int64_t n, const Codec& c, void* out, DType out_dtype) {
  const uint8_t* wire = static_cast<const uint8_t*>(src);
  if (out_dtype == DType::Float32 && disjoint(wire, c.wire_bytes(n), out, n * 4)) {
    run_decode_pieces<F>(wire, n, c, static_cast<float*>(out), false);  // fp32: no copy
    return;
  }
  float* run = run_scratch(n);
  run_decode_pieces<F>(wire, n, c, run, false);
  store_block(run, n, out, out_dtype, 0);
}

template <class F>
inline void run_decode_reduce_encode(const void* src, const void* x, DType x_dtype, int64_t n,
                                     const Codec& c, float divisor, const EncodeContext& ctx,
                                     void* dst) {
  float* run = run_scratch(n);
  run_decode_pieces<F>(static_cast<const uint8_t*>(src), n, c, run, false);
  add_block(x, x_dtype, 0, n, divisor, run);
  run_encode_pieces<F>(run, n, c, ctx, static_cast<uint8_t*>(dst));
}

}  // namespace ccompress::cpu

#define CC_CPU_RUN_FAMILY_HOST_OPS(ops)                                                     \
  struct RunFamily {                                                                        \
    static int64_t piece_bytes(const Codec& c, int64_t n) { return wire_bytes(c, n); }      \
    static void encode(const float* x, int64_t n, const Codec& c, const EncodeContext& ctx, \
                       uint8_t* dst, const ::ccompress::cpu::NextPiece& next) {             \
      encode_body(x, n, c, ctx, dst, next);                                                 \
    }                                                                                       \
    static void decode(const uint8_t* src, int64_t n, const Codec& c, float* out,           \
                       bool accumulate) {                                                   \
      decode_body(src, n, c, out, accumulate);                                              \
    }                                                                                       \
  };                                                                                        \
  inline void host_encode_body(const void* src, DType t, int64_t n, const Codec& c,         \
                               float divisor, const EncodeContext& ctx, void* dst) {        \
    ::ccompress::cpu::run_encode<RunFamily>(src, t, n, c, divisor, ctx, dst);               \
  }                                                                                         \
  inline void host_decode_accumulate_body(const void* src, int64_t n, const Codec& c,       \
                                          float* acc, bool assign) {                        \
    ::ccompress::cpu::run_decode_accumulate<RunFamily>(src, n, c, acc, assign);             \
  }                                                                                         \
  inline void host_decode_body(const void* src, int64_t n, const Codec& c, void* out,       \
                               DType t) {                                                   \
    ::ccompress::cpu::run_decode<RunFamily>(src, n, c, out, t);                             \
  }                                                                                         \
  inline void host_decode_reduce_encode_body(const void* src, const void* x, DType t,       \
                                             int64_t n, const Codec& c, float divisor,      \
                                             const EncodeContext& ctx, void* dst) {         \
    ::ccompress::cpu::run_decode_reduce_encode<RunFamily>(src, x, t, n, c, divisor, ctx,    \
                                                          dst);                             \
  }                                                                                         \
  CC_CPU_HOST_OPS_DISPATCH(ops)

// Defines `const HostOps ops` from host_encode_body, host_decode_accumulate_body,
// host_decode_body and host_decode_reduce_encode_body, each dispatched (isa_dispatch.h).
#define CC_CPU_HOST_OPS_DISPATCH(ops)                                                       \
  CC_CPU_DISPATCH(void, host_encode,                                                        \
                  (const void* src, DType t, int64_t n, const Codec& c, float divisor,      \
                   const EncodeContext& ctx, void* dst),                                    \
                  (src, t, n, c, divisor, ctx, dst))                                        \
  CC_CPU_DISPATCH(void, host_decode_accumulate,                                             \
                  (const void* src, int64_t n, const Codec& c, float* acc, bool assign),    \
                  (src, n, c, acc, assign))                                                 \
  CC_CPU_DISPATCH(void, host_decode,                                                        \
                  (const void* src, int64_t n, const Codec& c, void* out, DType t),         \
                  (src, n, c, out, t))                                                      \
  CC_CPU_DISPATCH(void, host_decode_reduce_encode,                                          \
                  (const void* src, const void* x, DType t, int64_t n, const Codec& c,      \
                   float divisor, const EncodeContext& ctx, void* dst),                     \
                  (src, x, t, n, c, divisor, ctx, dst))                                     \
  constexpr ::ccompress::HostOps ops = {host_encode, host_decode_accumulate, host_decode,   \
                                        host_decode_reduce_encode};
