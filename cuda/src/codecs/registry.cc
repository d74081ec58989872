#include "codecs/registry.h"

#include <deque>
#include <mutex>

#include "ccompress/error.h"

namespace ccompress {

namespace {

struct Registry {
  std::mutex mu;
  std::deque<CodecFamily> families;  // stable addresses for find_codec_family
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

bool register_codec_family(const CodecFamily& family) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const CodecFamily& f : r.families)
    CC_CHECK_AS(Error, std::string(f.base) != family.base,
                "codec family '" << family.base << "' registered twice");
  r.families.push_back(family);
  return true;
}

const CodecFamily* find_codec_family(const std::string& base) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const CodecFamily& f : r.families)
    if (base == f.base) return &f;
  return nullptr;
}

const CodecFamily* find_codec_family(CodecKind kind) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const CodecFamily& f : r.families)
    if (f.kind == kind) return &f;
  return nullptr;
}

const CodecFamily& require_codec_family(CodecKind kind) {
  const CodecFamily* f = find_codec_family(kind);
  CC_CHECK_AS(Unsupported, f != nullptr,
              "codec kind " << int(kind) << " is not registered in this build");
  return *f;
}

int64_t family_wire_bytes(const CodecFamily& f, const Codec& c, int64_t n) {
  if (c.run_block <= 0 || n <= c.run_block) return f.wire_bytes(c, n);
  const int64_t full = n / c.run_block, rest = n % c.run_block;
  const int64_t per_piece = f.wire_bytes(c, c.run_block);
  CC_CHECK_AS(Error, per_piece % 4 == 0, "codec piece of " << per_piece << " bytes is unaligned");
  return full * per_piece + (rest ? f.wire_bytes(c, rest) : 0);
}

std::vector<std::string> codec_family_help() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> out;
  for (const CodecFamily& f : r.families) out.emplace_back(f.help);
  return out;
}

std::vector<std::string> codec_family_bases() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> out;
  for (const CodecFamily& f : r.families) out.emplace_back(f.base);
  return out;
}

std::vector<std::string> codec_family_examples() {
  std::vector<const CodecFamily*> fams;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    for (const CodecFamily& f : r.families) fams.push_back(&f);
  }
  std::vector<std::string> out;
  for (const CodecFamily* f : fams) {
    Codec c;
    c.kind = f->kind;
    c.unbound = false;
    f->configure(c, CodecOptions{}, f->base);
    out.push_back(f->name(c));
  }
  return out;
}

}  // namespace ccompress
