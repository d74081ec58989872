// The raw family (none, bf16, fp16; format: raw.h): spec options, name, size, host loops and
// the registry entry.
#include <cmath>
#include <cstring>
#include <string>

#include "ccompress/error.h"
#include "codecs/raw/raw.h"
#include "codecs/registry.h"
#include "cpu/host_loops.h"
#include "cpu/isa_dispatch.h"
#include "cpu/run_family.h"

namespace ccompress {
namespace {

using cpu::kBlock;

void configure(Codec& c, const std::string& base, const CodecOptions& o,
               const std::string& spec) {
  CC_CHECK(o.given.empty() || (base != "none" && o.given == "S"),
           "codec '" << spec << "': " << base << " takes "
                     << (base == "none" ? "no options" : "only :sr"));
  if (base == "none") {
    c.unbound = true;  // the input dtype, bound at call time
    return;
  }
  c.raw_dtype = base == "bf16" ? DType::BFloat16 : DType::Float16;
  c.stochastic = o.stochastic;
}

std::string spec_name(const Codec& c) {
  // `none` bound to bfloat16 / float16 is the same wire format as bf16 / fp16, so it takes
  // that name; bound to float32 it stays `none`.
  if (c.unbound || c.raw_dtype == DType::Float32) return "none";
  return std::string(c.raw_dtype == DType::BFloat16 ? "bf16" : "fp16") +
         (c.stochastic ? ":sr" : "");
}

const char* kind_name(const Codec&) { return "raw"; }

int64_t wire_bytes(const Codec& c, int64_t n) {
  return n * static_cast<int64_t>(dtype_size(c.raw_dtype));
}

bool lossy(const Codec& c, DType input) {
  if (c.unbound || c.raw_dtype == input) return false;
  // Widening bf16/fp16 to fp32 is exact; every other pair of distinct dtypes loses bits.
  return c.raw_dtype != DType::Float32;
}

// The encode of buf into dst[off ..]: a plain cast, or with `:sr` a stochastic one whose
// noise for element off + i is drawn at index ctx.index + off + i.
void store_raw(const float* buf, int64_t len, void* dst, int64_t off, const Codec& codec,
               const EncodeContext& ctx) {
  if (!codec.stochastic) {
    cpu::store_block(buf, len, dst, codec.raw_dtype, off);
    return;
  }
  const uint64_t prefix = codecs::sr_prefix(ctx.seed, ctx.step, ctx.rank);
  uint16_t* p = static_cast<uint16_t*>(dst) + off;
  for (int64_t i = 0; i < len; ++i)
    p[i] = codecs::raw_cast_sr(buf[i], codec.raw_dtype,
                               codecs::sr_uniform_at(prefix, ctx.index + off + i));
}

void host_encode_body(const void* src, DType src_dtype, int64_t n, const Codec& codec,
                      float divisor, const EncodeContext& ctx, void* dst) {
  CC_CHECK(n >= 0, "element count " << n << " is negative");
  if (codec.raw_dtype == src_dtype && divisor == 1.0f) {
    std::memmove(dst, src, static_cast<size_t>(n) * dtype_size(src_dtype));
    return;
  }
  float buf[kBlock];
  cpu::for_each_group(n, kBlock, [&](int64_t, int64_t off, int64_t len) {
    cpu::load_block(src, src_dtype, off, len, divisor, buf);
    store_raw(buf, len, dst, off, codec, ctx);
  });
}

void host_decode_accumulate_body(const void* src, int64_t n, const Codec& codec, float* acc,
                                 bool assign) {
  cpu::load_accumulate_body(src, codec.raw_dtype, n, acc, assign);
}

void host_decode_body(const void* src, int64_t n, const Codec& codec, void* out,
                      DType out_dtype) {
  CC_CHECK(n >= 0, "element count " << n << " is negative");
  if (codec.raw_dtype == out_dtype) {
    std::memmove(out, src, static_cast<size_t>(n) * dtype_size(out_dtype));
    return;
  }
  float buf[kBlock];
  cpu::for_each_group(n, kBlock, [&](int64_t, int64_t off, int64_t len) {
    cpu::load_block(src, codec.raw_dtype, off, len, 1.0f, buf);
    cpu::store_block(buf, len, out, out_dtype, off);
  });
}

void host_decode_reduce_encode_body(const void* src, const void* x, DType x_dtype, int64_t n,
                                    const Codec& codec, float divisor,
                                    const EncodeContext& ctx, void* dst) {
  CC_CHECK(n >= 0, "element count " << n << " is negative");
  float buf[kBlock];
  cpu::for_each_group(n, kBlock, [&](int64_t, int64_t off, int64_t len) {
    cpu::load_block(src, codec.raw_dtype, off, len, 1.0f, buf);
    cpu::add_block(x, x_dtype, off, len, divisor, buf);
    store_raw(buf, len, dst, off, codec, ctx);
  });
}

CC_CPU_HOST_OPS_DISPATCH(kHostOps)

// raw.h: a round-to-nearest cast errs by half a unit in the last place (2^-24 float32,
// 2^-8 bf16, 2^-11 fp16) relative to |x|, and by half the subnormal spacing; a stochastic
// cast by up to a whole spacing.
ErrorModel error_model(const Codec& c) {
  const double sr = c.stochastic ? 2.0 : 1.0;
  ErrorModel m;
  m.cast = true;
  switch (c.raw_dtype) {
    case DType::Float32: m.u = std::ldexp(1.0, -24); m.floor = std::ldexp(1.0, -150); break;
    case DType::BFloat16: m.u = std::ldexp(1.0, -8); m.floor = std::ldexp(1.0, -134); break;
    case DType::Float16: m.u = std::ldexp(1.0, -11); m.floor = std::ldexp(1.0, -25); break;
  }
  m.u *= sr;
  m.floor *= sr;
  return m;
}

}  // namespace

extern const CodecFamily kRawFamily = {
    "raw", {"none", "bf16", "fp16", nullptr}, configure, spec_name, kind_name, wire_bytes,
    lossy, kHostOps,
    "none, bf16[:sr], fp16[:sr] (the input dtype, or a round-to-nearest cast to 16 bits)",
    error_model};

}  // namespace ccompress
