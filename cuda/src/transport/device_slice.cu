#include "transport/device_slice.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "ccompress/error.h"

namespace ccompress::cuda {

int64_t device_slice_bytes(int64_t fallback) {
  const char* v = std::getenv("CCOMPRESS_DEVICE_SLICE_MB");
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const double mib = std::strtod(v, &end);
  CC_CHECK_AS(InvalidArgument, end != v && *end == '\0' && std::isfinite(mib) && mib > 0 &&
                                   mib <= 65536,
              "CCOMPRESS_DEVICE_SLICE_MB='" << v << "' is not a size in MiB between 0 and 65536 "
              "(the device transports' pipelined slice, e.g. 4 or 0.5); unset it for the default");
  return std::max<int64_t>(1, int64_t(mib * double(1 << 20)));
}

}  // namespace ccompress::cuda
