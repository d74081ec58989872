// The host codec loops are compiled twice, for baseline x86-64 (SSE2) and for AVX2, and the
// AVX2 copy runs when the CPU has it: the library itself stays baseline, so it loads on any
// x86-64 machine, and the loops run about twice as fast where AVX2 is there
// (perf/bench/codec_throughput.py).
//
// CC_CPU_DISPATCH(ret, name, params, args) defines `ret name params`, which calls
// `name##_body args` in one of the two copies. `flatten` inlines everything the body calls,
// so the codec math of cuda/src/codecs (inline functions that other translation units also
// emit, for the baseline) is compiled for AVX2 inside the AVX2 copy instead of being called.
//
// Both copies give the same bits: the loops are integer operations and IEEE fp32 adds,
// multiplies and divides with contraction off (-ffp-contract=off), and no floating-point
// reduction is reordered. tests/codecs/test_cpu_isa.py compares them (CCOMPRESS_CPU_ISA=baseline
// forces the baseline copy).
#pragma once

#include "ccompress/common.h"

namespace ccompress {

/// True when the AVX2 copies run: the CPU has AVX2 and CCOMPRESS_CPU_ISA is not "baseline".
bool cpu_use_avx2();
/// "avx2" or "baseline": which copies run.
CC_API const char* cpu_isa();

}  // namespace ccompress

#if defined(__x86_64__) && defined(__GNUC__)
#define CC_CPU_DISPATCH(ret, name, params, args)                                            \
  __attribute__((target("avx2"), flatten, noinline)) ret name##_avx2 params {                 \
    return name##_body args;                                                                \
  }                                                                                         \
  __attribute__((flatten, noinline)) ret name##_baseline params { return name##_body args; } \
  ret name params { return ::ccompress::cpu_use_avx2() ? name##_avx2 args : name##_baseline args; }
#else
#define CC_CPU_DISPATCH(ret, name, params, args) \
  ret name params { return name##_body args; }
#endif
