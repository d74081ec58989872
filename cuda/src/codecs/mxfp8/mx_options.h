// The spec options of the MX families (mxfp8, mxfp8_e5m2, mxfp4): none but :g32, the block
// the MX formats fix, and their 8-bit E8M0 scale.
#pragma once

#include <string>

#include "ccompress/error.h"
#include "codecs/mxfp8/mxfp8.h"
#include "codecs/registry.h"

namespace ccompress {
namespace codecs {

inline void mx_configure(Codec& c, const std::string& base, const CodecOptions& o,
                         const std::string& spec) {
  CC_CHECK(o.given.find_first_not_of("g") == std::string::npos && (!o.group || o.group == kMxBlock),
           "codec '" << spec << "': " << base << " takes no options (MX blocks are 32 elements: "
                     << "only :g32 is accepted)");
  c.group = kMxBlock;
  c.scale_bits = 8;
}

}  // namespace codecs
}  // namespace ccompress
