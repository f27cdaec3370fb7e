// libFuzzer target: parse_safetensors_header on arbitrary bytes must either return a header whose
// tensors exactly tile the data section, or throw drama::Error; nothing else (no crash, no other
// exception, no sanitizer report). Seeds: fuzz/seeds/fuzz_safetensors_header/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "format/safetensors.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto h = drama::parse_safetensors_header({data, size}, size, "fuzz");
    // Invariants a successful parse promises to every reader.
    uint64_t at = 0;
    for (const auto& t : h.tensors) {
      if (t.begin != at || t.end < t.begin) std::abort();
      if (static_cast<uint64_t>(t.numel()) * drama::dtype_size(t.dtype) != t.end - t.begin)
        std::abort();
      at = t.end;
    }
    if (h.data_start < 8 || h.data_start + at != size) std::abort();
  } catch (const drama::Error&) {
  }
  return 0;
}
