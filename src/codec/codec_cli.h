// Choosing the codec for the command-line tools (`drama codec`, `drama voice write`,
// `drama bench codec`): --checkpoint DIR (uses DIR/codec and audio.num_codebooks of
// DIR/config.json) or --codec DIR, plus the backend options.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "backend/backend.h"
#include "codec/mimi.h"

namespace drama {

struct CodecCliOptions {
  std::string checkpoint;     // empty = not given
  std::string codec_dir;      // empty = not given
  int64_t num_codebooks = 0;  // 0 = from the checkpoint's config.json
  BackendOptions backend;
};

struct LoadedCodec {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<MimiModel> model;
  int64_t num_codebooks = 0;
};

// Throws UsageError when neither or both directories are given or the codebook count is
// unknown; `fallback_codebooks` (> 0) is used when neither the option nor a checkpoint says.
LoadedCodec load_codec_for_cli(const CodecCliOptions& options, int64_t fallback_codebooks = 0);

}  // namespace drama
