// The device-side check of kernels/exact_div.cuh: divides host arrays elementwise on the
// device, so that a test compares the result with the host's a / b bit for bit
// (tests/cuda/test_exact_div.py). Plain C++ (no CUDA headers), like device_util.h.
#pragma once

#include <cstdint>

namespace ccompress::cuda {

/// How exact_div_check divides.
enum class ExactDivPath {
  kPrepared,  ///< prepare_divisor(b) then exact_div(a, d): what the kernels call
  kGeneral,   ///< exact_div_detail::div_general(a, b): the path the fast one hides
};

/// out[i] <- a[i] / b[i] for i < n, computed on @p device through @p path. a, b and out are
/// host memory; the call copies them to and from device memory and waits for the result.
/// Throws CudaError when a CUDA call fails.
void exact_div_check(const float* a, const float* b, int64_t n, ExactDivPath path, float* out,
                     int device);

}  // namespace ccompress::cuda
