// Error feedback's rule for one element, shared by the CPU and CUDA backends
// (KernelBackend::feedback_residual): the residual is what the codec dropped, v - decoded,
// and a NaN or Inf never enters it.
#pragma once

#include "ccompress/common.h"
#include "codecs/float_convert.h"

namespace ccompress::codecs {

/// *residual <- v - decoded when v, decoded and their difference are finite, else 0.
/// Returns true when the element was set to 0 that way (it is counted).
CC_HOST_DEVICE bool feedback_residual_of(float v, float decoded, float* residual) {
  const float d = add_rn(v, -decoded);
  const bool finite = f32_is_finite(v) && f32_is_finite(decoded) && f32_is_finite(d);
  *residual = finite ? d : 0.f;
  return !finite;
}

}  // namespace ccompress::codecs
