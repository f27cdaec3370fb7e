#include "cli/weights_options.h"

#include <cstdio>

#include "engine/engine.h"
#include "util/error.h"

namespace drama::cli {

void add_weights_options(CLI::App& sub, WeightsOptions& o) {
  // The default shown in --help is the one in force: drama-mini when it is bundled, else mini.
  o.weights = default_weights();
  sub.add_option("--weights", o.weights,
                 "Shipped pinned checkpoint: drama-mini (the bundled model, read in place from "
                 "models/drama-mini; the default when it is there) or mini (random weights)")
      ->capture_default_str();
  sub.add_option("--checkpoint", o.checkpoint,
                 "Checkpoint directory, verified against --manifest (default: the pinned "
                 "manifest of --weights)");
  sub.add_option("--manifest", o.manifest,
                 "Manifest the checkpoint is verified against (label override:<name>)");
  sub.add_option("--backend", o.backend.kind, "auto, cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  sub.add_option("--threads", o.backend.threads, "CPU threads (0 = all cores)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  sub.add_flag("--mmap,!--no-mmap", o.mmap,
               "Map the checkpoint instead of reading it into memory (the default, --no-mmap): "
               "nothing is copied at load and processes share the page cache, but CPU decode "
               "read mapped weights 1.4-1.9x slower on the VM measured (docs/run.md)");
}

ResolvedCheckpoint resolve_weights(const WeightsOptions& o) {
  WeightsSelection sel;
  sel.weights = o.weights.empty() ? default_weights() : o.weights;
  if (!o.checkpoint.empty()) sel.checkpoint = o.checkpoint;
  if (!o.manifest.empty()) sel.manifest = o.manifest;
  sel.endpoint = default_endpoint();
  sel.cache_dir = default_cache_dir();
  ResolvedCheckpoint r = resolve_checkpoint(sel, engine_device_id(o.backend), default_lock_dir());
  std::fprintf(stderr, "drama: checkpoint %s (%s)\n", r.dir.string().c_str(), r.provenance.c_str());
  return r;
}

void add_codec_weights_options(CLI::App& sub, CodecWeightsOptions& o) {
  add_weights_options(sub, o.weights);
  sub.add_option("--codec", o.codec_dir,
                 "Bare codec directory (config.json + model.safetensors) instead of a checkpoint; "
                 "not verified against any manifest");
  sub.add_option("--num-codebooks", o.num_codebooks,
                 "Codebooks per frame (default: the checkpoint's audio.num_codebooks)")
      ->check(CLI::PositiveNumber);
}

CodecForCli load_codec_checked(const CLI::App& sub, const CodecWeightsOptions& o,
                               int64_t fallback_codebooks) {
  CodecCliOptions c;
  c.num_codebooks = o.num_codebooks;
  c.backend = o.weights.backend;
  CodecForCli out;
  if (!o.codec_dir.empty()) {
    for (const char* opt : {"--weights", "--checkpoint", "--manifest"})
      if (sub.count(opt)) throw UsageError(std::string("give --codec or ") + opt + ", not both.");
    c.codec_dir = o.codec_dir;
  } else {
    out.checkpoint = resolve_weights(o.weights);
    c.checkpoint = out.checkpoint->dir.string();
  }
  out.codec = load_codec_for_cli(c, fallback_codebooks);
  return out;
}

}  // namespace drama::cli
