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
  bool no_mmap = false;  // read the checkpoint into memory instead of mapping it
  Residency residency() const { return no_mmap ? Residency::InMemory : Residency::Mapped; }
};

void add_weights_options(CLI::App& sub, WeightsOptions& o);
// Resolves and verifies the checkpoint (resolve_checkpoint) and takes the device lock.
ResolvedCheckpoint resolve_weights(const WeightsOptions& o);

}  // namespace drama::cli
