#include "cpu/nonfinite.h"

#include <cstring>

#include "ccompress/error.h"
#include "cpu/isa_dispatch.h"

namespace ccompress {

namespace {

// An element is non-finite exactly when all its exponent bits are set.
template <class U>
NonFiniteCount count_bits(const void* data, int64_t n, U exp_mask) {
  const U* p = static_cast<const U*>(data);
  NonFiniteCount r;
  // A 32-bit (16-bit elements: 16-bit) counter per block keeps the vectorised loop in the
  // element's width, about twice as fast as widening every compare to 64 bits.
  constexpr int64_t kBlock = int64_t(1) << (8 * sizeof(U) - 1);
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = n - b < kBlock ? n : b + kBlock;
    U c = 0;
    for (int64_t i = b; i < e; ++i) c += U((p[i] & exp_mask) == exp_mask);
    r.count += int64_t(c);
  }
  if (r.count > 0)
    for (int64_t i = 0; i < n && r.first < 0; ++i)
      if ((p[i] & exp_mask) == exp_mask) r.first = i;
  return r;
}

NonFiniteCount count_any_body(const void* data, DType dtype, int64_t n) {
  switch (dtype) {
    case DType::Float32: return count_bits<uint32_t>(data, n, 0x7F800000u);
    case DType::BFloat16: return count_bits<uint16_t>(data, n, uint16_t(0x7F80u));
    case DType::Float16: return count_bits<uint16_t>(data, n, uint16_t(0x7C00u));
  }
  return {};
}

CC_CPU_DISPATCH(NonFiniteCount, count_any, (const void* data, DType dtype, int64_t n),
                (data, dtype, n))

}  // namespace

NonFiniteCount count_nonfinite(const void* data, DType dtype, int64_t n) {
  CC_CHECK(n >= 0, "element count " << n << " is negative");
  if (n == 0) return {};
  CC_CHECK(data != nullptr, "null buffer for " << n << " elements");
  return count_any(data, dtype, n);
}

}  // namespace ccompress
