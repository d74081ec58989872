// The codec families of this build, one line each: the registry's list (codecs/registry.h).
// A family's Codec::kind is its position here; the raw casts come first, so a default Codec
// (kind 0) is the unbound `none`. The order also orders the bases in error messages.
#include "codecs/registry.h"

namespace ccompress {

#define CC_CODEC_FAMILIES(X) \
  X(kRawFamily)              \
  X(kFp8Family)              \
  X(kTacoFamily)             \
  X(kHint8Family)            \
  X(kNvfp4Family)            \
  X(kHint4Family)            \
  X(kMxfp8Family)            \
  X(kMxfp4Family)

#define CC_DECLARE_FAMILY(f) extern const CodecFamily f;
CC_CODEC_FAMILIES(CC_DECLARE_FAMILY)
#undef CC_DECLARE_FAMILY

const std::vector<const CodecFamily*>& codec_families() {
#define CC_LIST_FAMILY(f) &f,
  static const std::vector<const CodecFamily*> all = {CC_CODEC_FAMILIES(CC_LIST_FAMILY)};
#undef CC_LIST_FAMILY
  return all;
}

}  // namespace ccompress
