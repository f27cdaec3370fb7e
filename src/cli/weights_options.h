// Weight, backend and checkpoint options shared by every command that loads weights: `serve`,
// `say`, `logits`, `bench decode`, `codec encode|decode` and `voice write` (interfaces.md: "same
// weight/backend options as serve", verified the same way; the default model when none given).
#pragma once

#include <CLI/CLI.hpp>
#include <filesystem>
#include <optional>
#include <string>

#include "backend/backend.h"
#include "codec/codec_cli.h"
#include "engine/launcher.h"
#include "format/safetensors.h"

namespace drama::cli {

struct WeightsOptions {
  std::string weights;  // add_weights_options sets default_weights(); empty means that too
  std::string checkpoint;
  std::string manifest;
  BackendOptions backend;
  bool mmap = false;  // map the checkpoint instead of reading it into memory (docs/run.md)
  Residency residency() const { return mmap ? Residency::Mapped : Residency::InMemory; }
};

void add_weights_options(CLI::App& sub, WeightsOptions& o);
// Resolves and verifies the checkpoint (resolve_checkpoint) and takes the device lock.
ResolvedCheckpoint resolve_weights(const WeightsOptions& o);

// The codec commands: the weight options above (the checkpoint's codec/, verified), or
// `--codec DIR`, a bare codec directory (config.json + model.safetensors) that no manifest
// names, for codec development; it is not verified and says so.
struct CodecWeightsOptions {
  WeightsOptions weights;
  std::string codec_dir;
  int64_t num_codebooks = 0;
};
void add_codec_weights_options(CLI::App& sub, CodecWeightsOptions& o);
struct CodecForCli {
  std::optional<ResolvedCheckpoint> checkpoint;  // holds the device lock while the codec runs
  LoadedCodec codec;
};
CodecForCli load_codec_checked(const CLI::App& sub, const CodecWeightsOptions& o,
                               int64_t fallback_codebooks = 0);

}  // namespace drama::cli
