#include "codec/codec_cli.h"

#include "format/config.h"
#include "util/error.h"

namespace drama {

LoadedCodec load_codec_for_cli(const CodecCliOptions& o, int64_t fallback_codebooks) {
  namespace fs = std::filesystem;
  if (o.checkpoint.empty() == o.codec_dir.empty())
    throw UsageError("give exactly one of --checkpoint DIR or --codec DIR.");
  fs::path codec_dir = o.codec_dir;
  int64_t k = o.num_codebooks;
  if (!o.checkpoint.empty()) {
    codec_dir = fs::path(o.checkpoint) / "codec";
    const fs::path config = fs::path(o.checkpoint) / "config.json";
    if (!fs::exists(config))
      throw UsageError("--checkpoint " + o.checkpoint + ": config.json is missing.");
    const int64_t model_k = load_drama3_config(config).audio.num_codebooks;
    if (k > 0 && k != model_k)
      throw UsageError("--num-codebooks " + std::to_string(k) + " differs from the checkpoint's " +
                       std::to_string(model_k) + ".");
    k = model_k;
  }
  if (k <= 0) k = fallback_codebooks;
  if (k <= 0) throw UsageError("--num-codebooks is required with --codec.");
  if (!fs::is_directory(codec_dir))
    throw UsageError("codec directory " + codec_dir.string() + " does not exist.");
  LoadedCodec lc;
  lc.backend = make_backend(o.backend);
  lc.model = std::make_unique<MimiModel>(codec_dir, *lc.backend);
  if (k > lc.model->num_quantizers())
    throw Error(codec_dir.string() + ": the codec has " +
                std::to_string(lc.model->num_quantizers()) + " codebooks, fewer than " +
                std::to_string(k) + ".");
  lc.num_codebooks = k;
  return lc;
}

}  // namespace drama
