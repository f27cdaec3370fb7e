#include "cli/weights_options.h"

#include <cstdio>

#include "engine/engine.h"

namespace drama::cli {

void add_weights_options(CLI::App& sub, WeightsOptions& o) {
  sub.add_option("--weights", o.weights, "Shipped pinned checkpoint (mini, nvfp4, bf16)");
  sub.add_option("--checkpoint", o.checkpoint,
                 "Checkpoint directory (verified against a manifest)");
  sub.add_option("--manifest", o.manifest, "Manifest the checkpoint is verified against");
  sub.add_option("--backend", o.backend.kind, "auto, cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  sub.add_option("--threads", o.backend.threads, "CPU threads (0 = all cores)")
      ->check(CLI::NonNegativeNumber);
  sub.add_flag("--mmap,!--no-mmap", o.mmap,
               "Map the checkpoint instead of reading it into memory (the default, --no-mmap): "
               "nothing is copied at load and processes share the page cache, but CPU decode "
               "read mapped weights 1.4-1.9x slower on the VM measured (docs/run.md)");
}

ResolvedCheckpoint resolve_weights(const WeightsOptions& o) {
  WeightsSelection sel;
  sel.weights = o.weights;
  if (!o.checkpoint.empty()) sel.checkpoint = o.checkpoint;
  if (!o.manifest.empty()) sel.manifest = o.manifest;
  sel.endpoint = default_endpoint();
  sel.cache_dir = default_cache_dir();
  ResolvedCheckpoint r = resolve_checkpoint(sel, engine_device_id(o.backend), default_lock_dir());
  std::fprintf(stderr, "drama: checkpoint %s (%s)\n", r.dir.string().c_str(), r.provenance.c_str());
  return r;
}

}  // namespace drama::cli
