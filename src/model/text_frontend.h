// Text frontends (spec section 3, text.frontend): text -> token ids 0..255 of the prompt.
//   "bytes":      the UTF-8 bytes of the text.
//   "espeak-ipa": the text turned into IPA by libespeak-ng in text.language (numbers, dates and
//                 abbreviations expanded by espeak-ng), then the IPA's UTF-8 bytes (docs/model.md,
//                 "Text frontends", says how clauses are joined).
#pragma once

#include <string>

namespace drama {

// The IPA string of `text` in `language` (an espeak-ng voice name such as "en-us"): each clause
// espeak_TextToPhonemes returns, followed by the punctuation mark that ended it in the text
// (one of . , ; : ! ?) if any, clauses separated by one space. Deterministic and safe to call
// from any thread (calls into espeak-ng are serialised: the library keeps global state). Throws
// drama::Error when the library is missing from the build, its data cannot be found (set
// ESPEAK_DATA_PATH to a folder holding espeak-ng-data/), or the language is unknown.
std::string espeak_ipa(const std::string& text, const std::string& language);

// Whether this build links libespeak-ng.
bool espeak_ipa_available();

}  // namespace drama
