// Bit-level float conversions and explicitly rounded arithmetic shared by host and device.
//
// Everything here is integer bit manipulation or a single IEEE operation, so the host and
// every CUDA architecture produce the same bits. The *_rn helpers exist because nvcc
// contracts a*b+c into an FMA by default (--fmad=true); the CPU backend does not, and one
// fused rounding instead of two would break host/device bit-identity.
#pragma once

#include <cstdint>
#include <cstring>

#include "ccompress/common.h"

namespace ccompress::codecs {

constexpr uint32_t kF32AbsMask = 0x7FFFFFFFu;
constexpr uint32_t kF32InfBits = 0x7F800000u;
constexpr uint32_t kF32MinNormalBits = 0x00800000u;  // FLT_MIN

CC_HOST_DEVICE uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

CC_HOST_DEVICE float f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

CC_HOST_DEVICE bool f32_is_finite(float f) { return (f32_bits(f) & kF32AbsMask) < kF32InfBits; }

CC_HOST_DEVICE float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

CC_HOST_DEVICE float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// IEEE division even if the device code is ever built with -prec-div=false.
CC_HOST_DEVICE float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// Rounds mant * 2^-shift to the nearest integer, ties to even. mant < 2^24, shift >= 1.
CC_HOST_DEVICE uint32_t shift_right_rne(uint32_t mant, uint32_t shift) {
  if (shift >= 32) return 0;
  uint32_t q = mant >> shift;
  uint32_t rem = mant & ((1u << shift) - 1u);
  uint32_t half = 1u << (shift - 1);
  return q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
}

// ---- bfloat16: the top half of an fp32 ----

CC_HOST_DEVICE uint16_t bf16_from_float(float f) {
  uint32_t u = f32_bits(f);
  if ((u & kF32AbsMask) > kF32InfBits) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  // Adding 0x7FFF plus the lsb of the kept half rounds to nearest even; a carry into the
  // exponent is the correct result (including rounding up to Inf).
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

CC_HOST_DEVICE float bf16_to_float(uint16_t h) { return f32_from_bits(uint32_t(h) << 16); }

// ---- IEEE binary16 ----

CC_HOST_DEVICE uint16_t f16_from_float(float f) {
  uint32_t u = f32_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & kF32AbsMask;
  if (a > kF32InfBits) return static_cast<uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
  // 65520 is the midpoint between 65504 and 2^16; it and everything above round to Inf.
  if (a >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);
  if (a >= 0x38800000u) {  // normal in fp16 (>= 2^-14): rebias, round on the 13 dropped bits
    uint32_t r = a - (112u << 23);
    r += 0xFFFu + ((r >> 13) & 1u);
    return static_cast<uint16_t>(sign | (r >> 13));
  }
  if (a < kF32MinNormalBits) return static_cast<uint16_t>(sign);  // far below 2^-25
  // Subnormal fp16: value / 2^-24 = mant * 2^(e - 126).
  uint32_t e = a >> 23;
  uint32_t mant = (a & 0x7FFFFFu) | 0x800000u;
  return static_cast<uint16_t>(sign | shift_right_rne(mant, 126u - e));
}

CC_HOST_DEVICE float f16_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1Fu;
  uint32_t m = h & 0x3FFu;
  if (e == 0) {
    // m * 2^-24 is exact in fp32; the multiply by a power of two cannot round.
    float v = mul_rn(static_cast<float>(m), 5.9604644775390625e-8f);
    return f32_from_bits(f32_bits(v) | sign);
  }
  if (e == 31) return f32_from_bits(sign | kF32InfBits | (m << 13));
  return f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

// ---- element access by DType (bits in memory, little-endian like the host and GPU) ----

CC_HOST_DEVICE float load_as_float(const void* p, DType t, int64_t i) {
  if (t == DType::Float32) return static_cast<const float*>(p)[i];
  uint16_t h = static_cast<const uint16_t*>(p)[i];
  return t == DType::BFloat16 ? bf16_to_float(h) : f16_to_float(h);
}

CC_HOST_DEVICE void store_from_float(void* p, DType t, int64_t i, float v) {
  if (t == DType::Float32) {
    static_cast<float*>(p)[i] = v;
  } else {
    static_cast<uint16_t*>(p)[i] = t == DType::BFloat16 ? bf16_from_float(v) : f16_from_float(v);
  }
}

}  // namespace ccompress::codecs
