#include "cpu/isa_dispatch.h"

#include <cstdlib>
#include <cstring>

#include "ccompress/error.h"

namespace ccompress {

namespace {

bool decide_avx2() {
  const char* want = std::getenv("CCOMPRESS_CPU_ISA");
  const bool forced_baseline = want != nullptr && std::strcmp(want, "baseline") == 0;
  CC_CHECK(want == nullptr || *want == '\0' || forced_baseline || std::strcmp(want, "auto") == 0,
           "CCOMPRESS_CPU_ISA='" << want << "': use 'auto' (the default) or 'baseline'");
#if defined(__x86_64__) && defined(__GNUC__)
  return !forced_baseline && __builtin_cpu_supports("avx2");
#else
  (void)forced_baseline;
  return false;
#endif
}

}  // namespace

bool cpu_use_avx2() {
  static const bool use = decide_avx2();
  return use;
}

const char* cpu_isa() { return cpu_use_avx2() ? "avx2" : "baseline"; }

}  // namespace ccompress
