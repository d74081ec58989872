#include "codecs/registry.h"

#include <atomic>
#include <cstring>

#include "ccompress/error.h"

namespace ccompress {

namespace {

constexpr size_t kMaxFamilies = 32;

// The CUDA module's launchers, by family position; set once when that module loads.
std::atomic<const DeviceOps*>& device_slot(size_t i) {
  static std::atomic<const DeviceOps*> slots[kMaxFamilies] = {};
  return slots[i];
}

}  // namespace

const CodecFamily* find_codec_family(const std::string& base) {
  for (const CodecFamily* f : codec_families())
    for (const char* const* b = f->bases; *b != nullptr; ++b)
      if (base == *b) return f;
  return nullptr;
}

const CodecFamily& codec_family(const Codec& c) {
  const auto& all = codec_families();
  const size_t i = static_cast<size_t>(c.kind);
  CC_CHECK_AS(Unsupported, i < all.size(),
              "codec kind " << i << " is not a codec family of this build");
  return *all[i];
}

CodecKind codec_kind_of(const CodecFamily& f) {
  const auto& all = codec_families();
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i] == &f) return static_cast<CodecKind>(i);
  CC_CHECK_AS(Error, false, "codec family '" << f.name << "' is not in codecs/families.cc");
}

std::vector<std::string> codec_family_bases() {
  std::vector<std::string> out;
  for (const CodecFamily* f : codec_families())
    for (const char* const* b = f->bases; *b != nullptr; ++b) out.emplace_back(*b);
  return out;
}

std::vector<std::string> codec_family_examples() {
  std::vector<std::string> out;
  for (const CodecFamily* f : codec_families())
    for (const char* const* b = f->bases; *b != nullptr; ++b)
      out.push_back(Codec::parse(*b).name());
  return out;
}

bool attach_device_ops(const char* family, const DeviceOps& ops) {
  const auto& all = codec_families();
  for (size_t i = 0; i < all.size(); ++i) {
    if (std::strcmp(all[i]->name, family) == 0) {
      device_slot(i).store(&ops, std::memory_order_release);
      return true;
    }
  }
  CC_CHECK_AS(Error, false, "CUDA launchers for unknown codec family '" << family << "'");
}

const DeviceOps& device_ops(const Codec& c) {
  const CodecFamily& f = codec_family(c);
  const DeviceOps* ops = device_slot(static_cast<size_t>(c.kind)).load(std::memory_order_acquire);
  CC_CHECK_AS(Unsupported, ops != nullptr,
              "the CUDA backend has no kernels for codec '" << f.spec_name(c) << "'");
  return *ops;
}

ErrorModel codec_error_model(const Codec& c) {
  CC_CHECK(!c.unbound, "codec 'none' is unbound: bind it to a dtype first (codec.bind(dtype))");
  return codec_family(c).error_model(c);
}

int64_t pieces_wire_bytes(int64_t (*piece_bytes)(const Codec&, int64_t), const Codec& c,
                          int64_t n) {
  if (c.run_block <= 0 || n <= c.run_block) return piece_bytes(c, n);
  const int64_t full = n / c.run_block, rest = n % c.run_block;
  const int64_t per_piece = piece_bytes(c, c.run_block);
  CC_CHECK_AS(Error, per_piece % 4 == 0, "codec piece of " << per_piece << " bytes is unaligned");
  return full * per_piece + (rest ? piece_bytes(c, rest) : 0);
}

}  // namespace ccompress
