// The espeak-ipa text frontend through libespeak-ng's espeak_TextToPhonemes (spec section 3).
// tools/reference/text_frontend.py calls the same library the same way (ctypes); the two must
// give the same bytes (tests/model/test_text_frontend.cpp).
#include "model/text_frontend.h"

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string_view>

#include "util/error.h"

#ifdef DRAMA_WITH_ESPEAK
#include <espeak-ng/speak_lib.h>
#endif

namespace drama {

#ifdef DRAMA_WITH_ESPEAK

namespace {

std::mutex espeak_mutex;          // espeak-ng is not thread-safe: one caller at a time
bool espeak_initialized = false;  // guarded by espeak_mutex
std::string espeak_language;      // the voice last selected, guarded by espeak_mutex

bool is_clause_mark(char c) {
  return c == '.' || c == ',' || c == ';' || c == ':' || c == '!' || c == '?';
}
bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}
bool is_closing(char c) {
  return c == '"' || c == '\'' || c == ')' || c == ']';
}

// The punctuation mark that ended a clause, from the bytes espeak_TextToPhonemes consumed for it
// (0 if none). espeak-ng may also consume the first character of the next clause: a trailing
// character that is neither space, mark nor closing quote/bracket is dropped first.
char clause_mark(std::string_view span, bool at_end) {
  size_t n = span.size();
  if (!at_end && n > 0 && !is_space(span[n - 1]) && !is_clause_mark(span[n - 1]) &&
      !is_closing(span[n - 1])) {
    --n;
    while (n > 0 && (static_cast<unsigned char>(span[n]) & 0xc0) == 0x80) --n;
  }
  while (n > 0 && (is_space(span[n - 1]) || is_closing(span[n - 1]))) --n;
  return n > 0 && is_clause_mark(span[n - 1]) ? span[n - 1] : 0;
}

// Code points espeak-ng reads as en-us text without switching its translator: tab, newlines,
// printable ASCII, Latin-1 Supplement and Latin Extended-A/B, general punctuation (quotes,
// dashes). Letters of other scripts make espeak-ng 1.51 switch language mid-text, and that path
// has a heap use-after-free (found by fuzz/fuzz_text_frontend.cpp under ASan): they, and bytes
// that are not UTF-8, become spaces before espeak-ng sees the text.
bool is_safe_code_point(uint32_t c) {
  return c == '\t' || c == '\n' || c == '\r' || (c >= 0x20 && c <= 0x7e) ||
         (c >= 0xa0 && c <= 0x24f) || (c >= 0x2010 && c <= 0x2027);
}

// espeak-ng 1.51 overflows a stack buffer on a long word after an abbreviation ("P." and 170
// letters: stack smashing in espeak_TextToPhonemes, found by fuzz/fuzz_text_frontend.cpp): a
// run of non-space bytes gets a space after every kMaxWordBytes (at a code point boundary), far
// below its 160-byte word buffer. No English word comes near it.
constexpr size_t kMaxWordBytes = 64;

bool is_space_byte(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

std::string safe_text(const std::string& text) {
  std::string out;
  size_t i = 0, word = 0;
  const size_t n = text.find('\0') == std::string::npos ? text.size() : text.find('\0');
  while (i < n) {
    const unsigned char b = static_cast<unsigned char>(text[i]);
    const size_t len = b < 0x80         ? 1
                       : (b >> 5) == 6  ? 2
                       : (b >> 4) == 14 ? 3
                       : (b >> 3) == 30 ? 4
                                        : 0;
    uint32_t c = len == 1 ? b : len == 2 ? (b & 0x1f) : len == 3 ? (b & 0x0f) : (b & 0x07);
    bool valid = len > 0 && i + len <= n;
    for (size_t k = 1; valid && k < len; ++k) {
      const unsigned char cont = static_cast<unsigned char>(text[i + k]);
      valid = (cont & 0xc0) == 0x80;
      c = (c << 6) | (cont & 0x3f);
    }
    // Shortest form only (no overlong encodings), no surrogates, nothing above U+10FFFF.
    static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    valid = valid && c >= kMin[len] && c <= 0x10ffff && !(c >= 0xd800 && c <= 0xdfff);
    const bool keep = valid && is_safe_code_point(c);
    if (keep && !is_space_byte(text[i]) && word + len > kMaxWordBytes) {
      out += ' ';
      word = 0;
    }
    if (keep)
      out.append(text, i, len);
    else
      out += ' ';
    word = keep && !is_space_byte(text[i]) ? word + len : 0;
    i += valid ? len : 1;
  }
  return out;
}

}  // namespace

bool espeak_ipa_available() {
  return true;
}

std::string espeak_ipa(const std::string& text, const std::string& language) {
  std::lock_guard<std::mutex> lock(espeak_mutex);
  if (!espeak_initialized) {
    // A null path: espeak-ng reads ESPEAK_DATA_PATH, else its compiled-in data folder.
    // DONT_EXIT: a missing data folder returns an error instead of ending the process.
    const int rate =
        espeak_Initialize(AUDIO_OUTPUT_SYNCHRONOUS, 0, nullptr, espeakINITIALIZE_DONT_EXIT);
    if (rate <= 0) {
      const char* path = std::getenv("ESPEAK_DATA_PATH");
      throw Error(
          std::string("text.frontend \"espeak-ipa\": libespeak-ng could not load its data ") +
          (path ? "from ESPEAK_DATA_PATH=" + std::string(path)
                : std::string("(set ESPEAK_DATA_PATH to the folder holding espeak-ng-data/)")));
    }
    espeak_initialized = true;
  }
  if (language != espeak_language) {
    if (espeak_SetVoiceByName(language.c_str()) != EE_OK) {
      espeak_language.clear();
      throw Error("text.language \"" + language + "\": espeak-ng has no such voice");
    }
    espeak_language = language;
  }
  std::string out;
  // espeak-ng reads a C string: the text ends at its first NUL byte (the reference does the same);
  // unsafe code points and non-UTF-8 bytes become spaces (is_safe_code_point).
  const std::string clean = safe_text(text);
  const char* const begin = clean.c_str();
  const void* cursor = begin;
  while (cursor != nullptr) {
    const char* before = static_cast<const char*>(cursor);
    const char* phonemes = espeak_TextToPhonemes(&cursor, espeakCHARS_UTF8, espeakPHONEMES_IPA);
    const char* after = cursor ? static_cast<const char*>(cursor) : begin + clean.size();
    std::string clause = phonemes ? phonemes : "";
    while (!clause.empty() && clause.back() == ' ') clause.pop_back();
    while (!clause.empty() && clause.front() == ' ') clause.erase(clause.begin());
    const char mark = clause_mark({before, static_cast<size_t>(after - before)}, !cursor);
    if (mark && !clause.empty()) clause += mark;
    if (clause.empty()) continue;
    if (!out.empty()) out += ' ';
    out += clause;
  }
  // espeak-ng can keep the end of a text pending ("H.." leaves a "dot" that would open the next
  // call's IPA): one call on a lone space flushes it, its output discarded.
  const void* flush = " ";
  while (flush != nullptr) espeak_TextToPhonemes(&flush, espeakCHARS_UTF8, espeakPHONEMES_IPA);
  return out;
}

#else

bool espeak_ipa_available() {
  return false;
}

std::string espeak_ipa(const std::string&, const std::string&) {
  throw Error(
      "text.frontend \"espeak-ipa\": this build of drama has no libespeak-ng (install "
      "libespeak-ng-dev and rebuild)");
}

#endif

}  // namespace drama
