#include "ccompress/codec.h"

#include <algorithm>
#include <cctype>
#include <utility>
#include <vector>

#include "ccompress/error.h"
#include "codecs/registry.h"

namespace ccompress {
namespace {

// The second line of every spec error: each base, and the per-call codecs that
// ccompress/autocodec.py resolves (auto8, auto4).
std::string valid_specs() {
  std::string s = "valid codec specs:";
  for (const std::string& b : codec_family_bases()) s += " " + b + ",";
  s += " auto8, auto4 (options :gN group, :hN rotation, :s8/:s16/:s32 scale bits, :rs random "
       "signs, :sr stochastic rounding)";
  return s;
}

// One canonical spec per base, the "did you mean" candidates.
std::vector<std::string> suggestion_candidates() {
  std::vector<std::string> c = codec_family_examples();
  c.push_back("auto8");
  c.push_back("auto4");
  return c;
}

// Levenshtein distance of two short names (case-insensitive).
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      const bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                        std::tolower(static_cast<unsigned char>(b[j - 1]));
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (same ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// " did you mean X or Y?" for the one or two candidates whose base is closest to @p base
// (a prefix such as "fp8" of a base counts as close), or "" when none is near.
std::string did_you_mean(const std::string& base) {
  std::vector<std::pair<size_t, std::string>> near;
  for (const std::string& cand : suggestion_candidates()) {
    const std::string cb = cand.substr(0, cand.find(':'));
    size_t d = edit_distance(base, cb);
    const bool prefix = base.size() >= 2 && cb.compare(0, base.size(), base) == 0;
    if (prefix) d = std::min<size_t>(d, 1);
    if (d <= 1 + cb.size() / 4) near.emplace_back(d, cand);  // ~ one typo per 4 letters
  }
  std::stable_sort(near.begin(), near.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  if (near.empty()) return "";
  std::string s = "; did you mean " + near[0].second;
  if (near.size() > 1 && near[1].first == near[0].first) s += " or " + near[1].second;
  return s + "?";
}

// Parses the digits of an option such as "g128" (after its letter); 0 when malformed.
int32_t parse_number(const std::string& s, size_t from) {
  if (s.size() <= from || s.size() > from + 5 || s[from] == '0') return 0;
  int32_t v = 0;
  for (size_t i = from; i < s.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return 0;
    v = v * 10 + (s[i] - '0');
  }
  return v;
}

// Splits "base:opt:opt" into the base and the options; throws on unknown or repeated ones.
std::string split_spec(const std::string& spec, CodecOptions& o) {
  std::string& given = o.given;
  size_t colon = spec.find(':');
  std::string base = spec.substr(0, colon);
  while (colon != std::string::npos) {
    size_t next = spec.find(':', colon + 1);
    std::string tok = spec.substr(colon + 1, next == std::string::npos ? next : next - colon - 1);
    colon = next;
    // One letter per option kind: 'S' for sr and 'R' for rs, else the option's first letter.
    char key = tok == "sr" ? 'S' : tok == "rs" ? 'R' : tok.empty() ? '?' : tok[0];
    CC_CHECK(given.find(key) == std::string::npos,
             "codec '" << spec << "': option '" << tok << "' is given twice\n" << valid_specs());
    given += key;
    if (key == 'S') {
      o.stochastic = true;
    } else if (key == 'R') {
      o.random_signs = true;
    } else if (key == 'g' && parse_number(tok, 1)) {
      o.group = parse_number(tok, 1);
    } else if (key == 'h' && parse_number(tok, 1)) {
      o.rotation = parse_number(tok, 1);
    } else if (key == 's' && (tok == "s8" || tok == "s16" || tok == "s32")) {
      o.scale_bits = parse_number(tok, 1);
    } else {
      CC_CHECK(false, "codec '" << spec << "': '" << tok << "' is not an option\n"
                                << valid_specs());
    }
  }
  return base;
}

}  // namespace

Codec Codec::parse(const std::string& spec) {
  CodecOptions o;
  const std::string base = split_spec(spec, o);
  CC_CHECK(base != "auto8" && base != "auto4",
           "codec '" << spec << "' is chosen per call from the data by a communicator: pass "
                     << "codec='" << base << "' to allreduce (or simulate.allreduce)");
  const CodecFamily* f = find_codec_family(base);
  CC_CHECK(f != nullptr,
           "unknown codec '" << spec << "'" << did_you_mean(base) << "\n" << valid_specs());
  Codec c;
  c.kind = codec_kind_of(*f);
  c.unbound = false;
  try {
    f->configure(c, base, o, spec);
  } catch (const InvalidArgument& e) {
    // A family names what is wrong in one line; the list of specs follows on the second.
    const std::string what = e.what();
    if (what.find('\n') != std::string::npos) throw;
    throw InvalidArgument(what + "\n" + valid_specs());
  }
  return c;
}

std::string Codec::name() const { return codec_family(*this).spec_name(*this); }

Codec Codec::bind(DType input) const {
  Codec c = *this;
  if (c.unbound) {
    c.unbound = false;
    c.raw_dtype = input;
  }
  return c;
}

int64_t Codec::wire_bytes(int64_t n) const {
  CC_CHECK(!unbound, "codec 'none' is unbound: bind it to a dtype first (Codec.bind(dtype))");
  CC_CHECK(n >= 0, "element count " << n << " is negative");
  // Far beyond any real tensor; keeps every size formula free of int64 overflow, so an
  // absurd count read from a peer is refused instead of wrapping around.
  CC_CHECK(n <= kMaxElements, "element count " << n << " exceeds the largest supported ("
                                                << kMaxElements << ")");
  return codec_family(*this).wire_bytes(*this, n);
}

bool Codec::lossy(DType input) const {
  const CodecFamily& f = codec_family(*this);
  return f.lossy == nullptr || f.lossy(*this, input);
}

uint32_t Codec::id() const {
  // FNV-1a of the canonical name, which determines the wire format exactly; the unbound
  // `none` (never on the wire) gets its own bit.
  uint32_t h = 2166136261u;
  for (char ch : name()) h = (h ^ static_cast<uint8_t>(ch)) * 16777619u;
  return unbound ? (h | 1u) : (h & ~1u);
}

}  // namespace ccompress
