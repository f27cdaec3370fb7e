// The espeak-ipa text frontend through libespeak-ng's espeak_TextToPhonemes (spec section 3).
// tools/reference/text_frontend.py calls the same library the same way (ctypes); the two must
// give the same bytes (tests/model/test_text_frontend.cpp).
#include "model/text_frontend.h"

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
  // espeak-ng reads a C string: the text ends at its first NUL byte (the reference does the same).
  const std::string clean = text.substr(0, text.find('\0'));
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
