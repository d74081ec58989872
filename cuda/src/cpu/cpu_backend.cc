#include "cpu/cpu_backend.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "ccompress/error.h"
#include "codecs/feedback.h"
#include "codecs/float_convert.h"
#include "codecs/fp8.h"
#include "codecs/group_codec.h"
#include "codecs/registry.h"
#include "codecs/stochastic.h"
#include "cpu/isa_dispatch.h"
#include "cpu/nonfinite.h"

namespace ccompress {
namespace {

using codecs::Fp8E4M3;
using codecs::Fp8E5M2;

// Largest scale group, and the block size raw codecs stream through the stack buffer.
constexpr int64_t kBlock = 1024;

void check_args(const Codec& codec, int64_t n) {
  CC_CHECK(!codec.unbound, "codec 'none' is unbound: bind it to a dtype first");
  CC_CHECK(n >= 0, "element count " << n << " is negative");
  CC_CHECK(codec.kind == CodecKind::Raw || (codec.group >= 16 && codec.group <= kBlock),
           "codec group " << codec.group << " is outside 16..1024");
}

// Calls fn(i, float(src[off + i])) for i < len, with the dtype switch outside the loop.
template <class Fn>
inline void for_each_loaded(const void* src, DType t, int64_t off, int64_t len, Fn fn) {
  if (t == DType::Float32) {
    const float* p = static_cast<const float*>(src) + off;
    for (int64_t i = 0; i < len; ++i) fn(i, p[i]);
  } else if (t == DType::BFloat16) {
    const uint16_t* p = static_cast<const uint16_t*>(src) + off;
    for (int64_t i = 0; i < len; ++i) fn(i, codecs::bf16_to_float(p[i]));
  } else {
    const uint16_t* p = static_cast<const uint16_t*>(src) + off;
    for (int64_t i = 0; i < len; ++i) fn(i, codecs::f16_to_float(p[i]));
  }
}

// buf <- float(src[off .. off+len)) / divisor. Dividing by 1 is exact, so it is skipped.
void load_block(const void* src, DType t, int64_t off, int64_t len, float divisor, float* buf) {
  for_each_loaded(src, t, off, len, [buf](int64_t i, float v) { buf[i] = v; });
  if (divisor != 1.0f)
    for (int64_t i = 0; i < len; ++i) buf[i] = codecs::div_rn(buf[i], divisor);
}

// buf <- buf + float(x[off ..]) / divisor: the fused ring hop's sum, then its average.
void add_block(const void* x, DType t, int64_t off, int64_t len, float divisor, float* buf) {
  for_each_loaded(x, t, off, len,
                  [buf](int64_t i, float v) { buf[i] = codecs::add_rn(buf[i], v); });
  if (divisor != 1.0f)
    for (int64_t i = 0; i < len; ++i) buf[i] = codecs::div_rn(buf[i], divisor);
}

void store_block(const float* buf, int64_t len, void* dst, DType t, int64_t off) {
  if (t == DType::Float32) {
    if (len > 0) std::memcpy(static_cast<float*>(dst) + off, buf, static_cast<size_t>(len) * 4);
  } else if (t == DType::BFloat16) {
    uint16_t* p = static_cast<uint16_t*>(dst) + off;
    for (int64_t i = 0; i < len; ++i) p[i] = codecs::bf16_from_float(buf[i]);
  } else {
    uint16_t* p = static_cast<uint16_t*>(dst) + off;
    for (int64_t i = 0; i < len; ++i) p[i] = codecs::f16_from_float(buf[i]);
  }
}

// A raw codec's encode of buf into dst[off ..]: a plain cast, or with `:sr` a stochastic one
// whose noise for element off + i is drawn at index ctx.index + off + i.
void store_raw(const float* buf, int64_t len, void* dst, int64_t off, const Codec& codec,
               const EncodeContext& ctx) {
  if (!codec.stochastic) {
    store_block(buf, len, dst, codec.raw_dtype, off);
    return;
  }
  const uint64_t prefix = codecs::sr_prefix(ctx.seed, ctx.step, ctx.rank);
  uint16_t* p = static_cast<uint16_t*>(dst) + off;
  for (int64_t i = 0; i < len; ++i) {
    float u = codecs::sr_uniform_at(prefix, ctx.index + off + i);
    p[i] = codec.raw_dtype == DType::BFloat16 ? codecs::bf16_from_float_sr(buf[i], u)
                                              : codecs::f16_from_float_sr(buf[i], u);
  }
}

// Runs fn(F{}) with F the FP8 format of a scaled codec.
template <class Fn>
inline void with_fp8_format(CodecKind kind, Fn fn) {
  if (kind == CodecKind::Fp8E4M3) {
    fn(Fp8E4M3{});
  } else {
    fn(Fp8E5M2{});
  }
}

// Built from codecs::fp8_to_float itself, so it is that function, tabulated.
template <class F>
const float* fp8_lut() {
  static const std::array<float, 256> lut = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i) t[i] = codecs::fp8_to_float<F>(static_cast<uint8_t>(i));
    return t;
  }();
  return lut.data();
}

// Walks the groups of an FP8 wire buffer: fn(group index, first element, length).
template <class Fn>
inline void for_each_group(int64_t n, int64_t group, Fn fn) {
  for (int64_t g = 0, off = 0; off < n; ++g, off += group) fn(g, off, std::min(group, n - off));
}

float load_scale(const void* wire, int64_t n, int64_t g) {
  float s;
  std::memcpy(&s, static_cast<const uint8_t*>(wire) + codecs::fp8_scales_offset(n) + 4 * g, 4);
  return s;
}

// With `:sr` the noise of the run's element off + i is drawn at index ctx.index + off + i.
template <class F>
void quantize_group(const float* x, int64_t len, void* wire, int64_t n, int64_t g, int64_t off,
                    const Codec& codec, const EncodeContext& ctx) {
  int32_t amax = 0;
  for (int64_t i = 0; i < len; ++i) amax = std::max(amax, codecs::finite_abs_bits(x[i]));
  float s = codecs::group_scale<F>(amax);
  uint8_t* q = static_cast<uint8_t*>(wire) + off;
  if (codec.stochastic) {
    for (int64_t i = 0; i < len; ++i)
      q[i] = codecs::group_quantize_sr<F>(
          x[i], s, codecs::sr_uniform(ctx.seed, ctx.step, ctx.rank, ctx.index + off + i));
  } else {
    for (int64_t i = 0; i < len; ++i) q[i] = codecs::group_quantize<F>(x[i], s);
  }
  std::memcpy(static_cast<uint8_t*>(wire) + codecs::fp8_scales_offset(n) + 4 * g, &s, 4);
}

// The pad between payload and scales is zeroed so equal inputs give equal wire bytes.
void zero_fp8_padding(void* wire, int64_t n) {
  uint8_t* p = static_cast<uint8_t*>(wire);
  for (int64_t i = n; i < codecs::fp8_scales_offset(n); ++i) p[i] = 0;
}

template <class F>
void dequantize_group(const void* wire, int64_t n, int64_t g, int64_t off, int64_t len,
                      float* out) {
  const float* lut = fp8_lut<F>();
  const uint8_t* q = static_cast<const uint8_t*>(wire) + off;
  float s = load_scale(wire, n, g);
  for (int64_t i = 0; i < len; ++i) out[i] = codecs::mul_rn(lut[q[i]], s);
}

// Families registered in codecs/registry.h work on whole runs of fp32 values: one scratch
// buffer per thread, grown to the largest run seen (a slice, normally).
const CodecFamily* registered_family(const Codec& codec) {
  if (codec.kind == CodecKind::Raw || codec.kind == CodecKind::Fp8E4M3 ||
      codec.kind == CodecKind::Fp8E5M2)
    return nullptr;
  return &require_codec_family(codec.kind);
}

float* run_scratch(int64_t n) {
  thread_local std::vector<float> buf(1);  // never empty: data() is never null
  if (static_cast<int64_t>(buf.size()) < n) buf.resize(static_cast<size_t>(n));
  return buf.data();
}

// Whether [a, a + a_bytes) and [b, b + b_bytes) do not overlap.
bool disjoint(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
  const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa + static_cast<uintptr_t>(a_bytes) <= pb || pb + static_cast<uintptr_t>(b_bytes) <= pa;
}

// A run of a family is its pieces (Codec::run_block) encoded one after the other.
void family_encode(const CodecFamily& f, const float* x, int64_t n, const Codec& c,
                   const EncodeContext& ctx, uint8_t* dst) {
  for_each_piece(c, n, [&](int64_t off, int64_t len) {
    EncodeContext at = ctx;
    at.index += off;
    f.encode(x + off, len, c, at, dst);
    dst += f.wire_bytes(c, len);
  });
}

void family_decode(const CodecFamily& f, const uint8_t* src, int64_t n, const Codec& c,
                   float* out) {
  for_each_piece(c, n, [&](int64_t off, int64_t len) {
    f.decode(src, len, c, out + off);
    src += f.wire_bytes(c, len);
  });
}

void load_accumulate_any_body(const void* src, DType src_dtype, int64_t n, float* acc,
                              bool assign) {
  CC_CHECK(n >= 0, "element count " << n << " is negative");
  if (assign) {
    for_each_loaded(src, src_dtype, 0, n, [acc](int64_t i, float v) { acc[i] = v; });
  } else {
    for_each_loaded(src, src_dtype, 0, n,
                    [acc](int64_t i, float v) { acc[i] = codecs::add_rn(acc[i], v); });
  }
}

void encode_any_body(const void* src, DType src_dtype, int64_t n, const Codec& codec,
                     float divisor, const EncodeContext& ctx, void* dst) {
  if (const CodecFamily* f = registered_family(codec)) {
    // Families read fp32: other input is converted (and divided) into the run buffer first.
    const float* run = static_cast<const float*>(src);
    if (src_dtype != DType::Float32 || divisor != 1.0f) {
      float* buf = run_scratch(n);
      load_block(src, src_dtype, 0, n, divisor, buf);
      run = buf;
    }
    family_encode(*f, run, n, codec, ctx, static_cast<uint8_t*>(dst));
    return;
  }
  check_args(codec, n);
  float buf[kBlock];
  if (codec.kind == CodecKind::Raw) {
    if (codec.raw_dtype == src_dtype && divisor == 1.0f) {
      std::memmove(dst, src, static_cast<size_t>(n) * dtype_size(src_dtype));
      return;
    }
    for_each_group(n, kBlock, [&](int64_t, int64_t off, int64_t len) {
      load_block(src, src_dtype, off, len, divisor, buf);
      store_raw(buf, len, dst, off, codec, ctx);
    });
    return;
  }
  zero_fp8_padding(dst, n);
  with_fp8_format(codec.kind, [&](auto fmt) {
    using F = decltype(fmt);
    for_each_group(n, codec.group, [&](int64_t g, int64_t off, int64_t len) {
      // fp32 input needs no conversion: quantize it in place of a copy.
      const float* x = static_cast<const float*>(src) + off;
      if (src_dtype != DType::Float32 || divisor != 1.0f) {
        load_block(src, src_dtype, off, len, divisor, buf);
        x = buf;
      }
      quantize_group<F>(x, len, dst, n, g, off, codec, ctx);
    });
  });
}

void decode_accumulate_any_body(const void* src, int64_t n, const Codec& codec, float* acc,
                                bool assign) {
  if (const CodecFamily* f = registered_family(codec)) {
    const uint8_t* wire = static_cast<const uint8_t*>(src);
    if (assign && disjoint(wire, codec.wire_bytes(n), acc, n * 4)) {
      family_decode(*f, wire, n, codec, acc);  // straight into the accumulator
      return;
    }
    float* run = run_scratch(n);
    family_decode(*f, wire, n, codec, run);
    load_accumulate_any_body(run, DType::Float32, n, acc, assign);
    return;
  }
  check_args(codec, n);
  if (codec.kind == CodecKind::Raw) {
    load_accumulate_any_body(src, codec.raw_dtype, n, acc, assign);
    return;
  }
  with_fp8_format(codec.kind, [&](auto fmt) {
    using F = decltype(fmt);
    const float* lut = fp8_lut<F>();
    const uint8_t* q = static_cast<const uint8_t*>(src);
    for_each_group(n, codec.group, [&](int64_t g, int64_t off, int64_t len) {
      float s = load_scale(src, n, g);
      float* a = acc + off;
      if (assign) {
        for (int64_t i = 0; i < len; ++i) a[i] = codecs::mul_rn(lut[q[off + i]], s);
      } else {
        for (int64_t i = 0; i < len; ++i)
          a[i] = codecs::add_rn(a[i], codecs::mul_rn(lut[q[off + i]], s));
      }
    });
  });
}

void decode_any_body(const void* src, int64_t n, const Codec& codec, void* out,
                     DType out_dtype) {
  if (const CodecFamily* f = registered_family(codec)) {
    const uint8_t* wire = static_cast<const uint8_t*>(src);
    if (out_dtype == DType::Float32 && disjoint(wire, codec.wire_bytes(n), out, n * 4)) {
      family_decode(*f, wire, n, codec, static_cast<float*>(out));  // no copy for fp32 output
      return;
    }
    float* run = run_scratch(n);
    family_decode(*f, wire, n, codec, run);
    store_block(run, n, out, out_dtype, 0);
    return;
  }
  check_args(codec, n);
  float buf[kBlock];
  if (codec.kind == CodecKind::Raw) {
    if (codec.raw_dtype == out_dtype) {
      std::memmove(out, src, static_cast<size_t>(n) * dtype_size(out_dtype));
      return;
    }
    for_each_group(n, kBlock, [&](int64_t, int64_t off, int64_t len) {
      load_block(src, codec.raw_dtype, off, len, 1.0f, buf);
      store_block(buf, len, out, out_dtype, off);
    });
    return;
  }
  with_fp8_format(codec.kind, [&](auto fmt) {
    using F = decltype(fmt);
    for_each_group(n, codec.group, [&](int64_t g, int64_t off, int64_t len) {
      dequantize_group<F>(src, n, g, off, len, buf);
      store_block(buf, len, out, out_dtype, off);
    });
  });
}

void decode_reduce_encode_any_body(const void* src, const void* x, DType x_dtype, int64_t n,
                                   const Codec& codec, float divisor,
                                   const EncodeContext& ctx, void* dst) {
  if (const CodecFamily* f = registered_family(codec)) {
    float* run = run_scratch(n);
    family_decode(*f, static_cast<const uint8_t*>(src), n, codec, run);
    add_block(x, x_dtype, 0, n, divisor, run);
    family_encode(*f, run, n, codec, ctx, static_cast<uint8_t*>(dst));
    return;
  }
  check_args(codec, n);
  float buf[kBlock];
  if (codec.kind == CodecKind::Raw) {
    for_each_group(n, kBlock, [&](int64_t, int64_t off, int64_t len) {
      load_block(src, codec.raw_dtype, off, len, 1.0f, buf);
      add_block(x, x_dtype, off, len, divisor, buf);
      store_raw(buf, len, dst, off, codec, ctx);
    });
    return;
  }
  with_fp8_format(codec.kind, [&](auto fmt) {
    using F = decltype(fmt);
    for_each_group(n, codec.group, [&](int64_t g, int64_t off, int64_t len) {
      dequantize_group<F>(src, n, g, off, len, buf);
      add_block(x, x_dtype, off, len, divisor, buf);
      quantize_group<F>(buf, len, dst, n, g, off, codec, ctx);
    });
  });
  zero_fp8_padding(dst, n);
}

void finalize_any_body(const float* acc, int64_t n, float divisor, void* out,
                       DType out_dtype) {
  CC_CHECK(n >= 0, "element count " << n << " is negative");
  float buf[kBlock];
  for_each_group(n, kBlock, [&](int64_t, int64_t off, int64_t len) {
    load_block(acc, DType::Float32, off, len, divisor, buf);
    store_block(buf, len, out, out_dtype, off);
  });
}

int64_t feedback_residual_any_body(const float* v, const float* decoded, int64_t n,
                                   float* residual) {
  CC_CHECK(n >= 0, "element count " << n << " is negative");
  int64_t dropped = 0;
  for (int64_t i = 0; i < n; ++i)
    dropped += codecs::feedback_residual_of(v[i], decoded[i], residual + i) ? 1 : 0;
  return dropped;
}

// The entry points, each compiled for the baseline and for AVX2 (isa_dispatch.h).
CC_CPU_DISPATCH(void, encode_any,
                (const void* src, DType src_dtype, int64_t n, const Codec& codec, float divisor,
                 const EncodeContext& ctx, void* dst),
                (src, src_dtype, n, codec, divisor, ctx, dst))
CC_CPU_DISPATCH(void, decode_accumulate_any,
                (const void* src, int64_t n, const Codec& codec, float* acc, bool assign),
                (src, n, codec, acc, assign))
CC_CPU_DISPATCH(void, decode_any,
                (const void* src, int64_t n, const Codec& codec, void* out, DType out_dtype),
                (src, n, codec, out, out_dtype))
CC_CPU_DISPATCH(void, load_accumulate_any,
                (const void* src, DType src_dtype, int64_t n, float* acc, bool assign),
                (src, src_dtype, n, acc, assign))
CC_CPU_DISPATCH(void, decode_reduce_encode_any,
                (const void* src, const void* x, DType x_dtype, int64_t n, const Codec& codec,
                 float divisor, const EncodeContext& ctx, void* dst),
                (src, x, x_dtype, n, codec, divisor, ctx, dst))
CC_CPU_DISPATCH(void, finalize_any,
                (const float* acc, int64_t n, float divisor, void* out, DType out_dtype),
                (acc, n, divisor, out, out_dtype))
CC_CPU_DISPATCH(int64_t, feedback_residual_any,
                (const float* v, const float* decoded, int64_t n, float* residual),
                (v, decoded, n, residual))

}  // namespace

void CpuBackend::encode(const void* src, DType src_dtype, int64_t n, const Codec& codec,
                        float divisor, const EncodeContext& ctx, void* dst) {
  encode_any(src, src_dtype, n, codec, divisor, ctx, dst);
}

void CpuBackend::decode_accumulate(const void* src, int64_t n, const Codec& codec, float* acc,
                                   bool assign) {
  decode_accumulate_any(src, n, codec, acc, assign);
}

void CpuBackend::decode(const void* src, int64_t n, const Codec& codec, void* out,
                        DType out_dtype) {
  decode_any(src, n, codec, out, out_dtype);
}

void CpuBackend::load_accumulate(const void* src, DType src_dtype, int64_t n, float* acc,
                                 bool assign) {
  load_accumulate_any(src, src_dtype, n, acc, assign);
}

void CpuBackend::decode_reduce_encode(const void* src, const void* x, DType x_dtype, int64_t n,
                                      const Codec& codec, float divisor,
                                      const EncodeContext& ctx, void* dst) {
  decode_reduce_encode_any(src, x, x_dtype, n, codec, divisor, ctx, dst);
}

void CpuBackend::finalize(const float* acc, int64_t n, float divisor, void* out,
                          DType out_dtype) {
  finalize_any(acc, n, divisor, out, out_dtype);
}

bool CpuBackend::count_nonfinite(const void* src, DType t, int64_t n, int64_t* count) {
  *count += ccompress::count_nonfinite(src, t, n).count;
  return true;
}

void CpuBackend::feedback_residual(const float* v, const float* decoded, int64_t n,
                                   float* residual, int64_t* count) {
  *count += feedback_residual_any(v, decoded, n, residual);
}

CpuBackend& cpu_backend() {
  static CpuBackend instance;
  return instance;
}

}  // namespace ccompress
