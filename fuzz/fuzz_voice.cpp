// libFuzzer target: voice and codes file parsing on arbitrary bytes must return a consistent
// Voice (codes = frames x num_codebooks, no negative code) or throw drama::Error; a parsed file
// must serialize and parse back to the same codes. Seeds: fuzz/seeds/fuzz_voice/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "format/voice.h"
#include "util/error.h"

namespace {

void check(const drama::Voice& v) {
  if (v.frames < 1 || v.num_codebooks < 1) std::abort();
  if (static_cast<int64_t>(v.codes.size()) != v.frames * v.num_codebooks) std::abort();
  for (int32_t c : v.codes)
    if (c < 0) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<uint8_t> bytes(data, data + size);
  try {
    const drama::Voice v = drama::parse_voice(bytes, "fuzz");
    check(v);
    if (drama::parse_voice(drama::serialize_voice(v), "again").codes != v.codes) std::abort();
  } catch (const drama::Error&) {
  }
  try {
    const drama::Voice c = drama::parse_codes(bytes, "fuzz");
    check(c);
    if (drama::parse_codes(drama::serialize_codes(c), "again").codes != c.codes) std::abort();
  } catch (const drama::Error&) {
  }
  return 0;
}
