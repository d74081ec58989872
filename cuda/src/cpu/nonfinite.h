// Counts NaN and +-Inf elements of a host buffer: the per-call report of the NaN/Inf policy
// (README, "Guarantees"). One branch-free pass over the exponent bits; a second pass finds
// the first such element only when there is one.
#pragma once

#include <cstdint>

#include "ccompress/common.h"

namespace ccompress {

struct NonFiniteCount {
  int64_t count = 0;   ///< elements that are NaN or +-Inf
  int64_t first = -1;  ///< index of the first of them, -1 when none
};

CC_API NonFiniteCount count_nonfinite(const void* data, DType dtype, int64_t n);

}  // namespace ccompress
