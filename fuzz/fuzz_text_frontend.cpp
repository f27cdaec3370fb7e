// libFuzzer target: the espeak-ipa text frontend (src/model/text_frontend.cpp) on arbitrary bytes,
// as request text reaches it: it must return or throw drama::Error, never crash, and give the same
// tokens for the same text twice (the clause-mark scan must stay inside the text).
// Seeds: fuzz/seeds/fuzz_text_frontend/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "model/text_frontend.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (!drama::espeak_ipa_available() || size > 4096) return 0;
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const std::string a = drama::espeak_ipa(text, "en-us");
    if (drama::espeak_ipa(text, "en-us") != a) std::abort();
  } catch (const drama::Error&) {
  }
  return 0;
}
