// Weight, backend and checkpoint options shared by `say`, `logits` and `bench decode`
// (interfaces.md: "same weight/backend options as serve").
#pragma once

#include <CLI/CLI.hpp>
#include <filesystem>
#include <string>

#include "backend/backend.h"
#include "engine/launcher.h"
#include "format/safetensors.h"

namespace drama::cli {

struct WeightsOptions {
  std::string weights = "mini";
  std::string checkpoint;
  std::string manifest;
  BackendOptions backend;
  bool mmap = false;  // map the checkpoint instead of reading it into memory (docs/run.md)
  Residency residency() const { return mmap ? Residency::Mapped : Residency::InMemory; }
};

void add_weights_options(CLI::App& sub, WeightsOptions& o);
// Resolves and verifies the checkpoint (resolve_checkpoint) and takes the device lock.
ResolvedCheckpoint resolve_weights(const WeightsOptions& o);

}  // namespace drama::cli
