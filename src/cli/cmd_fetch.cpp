// `drama fetch [--weights W | --manifest FILE] [--endpoint URL] [--dir DIR]` (interfaces.md,
// spec section 9): download (or, for the shipped "mini", regenerate) into a temporary sibling,
// verify, rename into place. An existing destination is only verified, never modified.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "engine/launcher.h"
#include "util/progress.h"

namespace drama::cli {

void register_fetch(CLI::App& app, Runner& run) {
  auto* sub = app.add_subcommand("fetch", "Download and verify a pinned checkpoint");
  struct Args {
    std::string weights = "mini", manifest, endpoint, dir;
  };
  auto args = std::make_shared<Args>();
  auto* weights = sub->add_option("--weights", args->weights,
                                  "Weights with a shipped pinned manifest (default mini)");
  auto* manifest = sub->add_option("--manifest", args->manifest, "A manifest JSON file to fetch");
  weights->excludes(manifest);
  manifest->excludes(weights);
  sub->add_option("--endpoint", args->endpoint,
                  "Hub endpoint (default $DRAMA_ENDPOINT or https://huggingface.co)");
  sub->add_option("--dir", args->dir,
                  "Destination directory (default $DRAMA_CACHE or ~/.cache/drama, then the "
                  "manifest name)");
  sub->callback([&run, args] {
    run = [args] {
      WeightsSelection s;
      s.weights = args->weights;
      if (!args->manifest.empty()) s.manifest = args->manifest;
      const SelectedManifest sel = select_manifest(s);
      const Manifest& m = sel.manifest;
      const std::filesystem::path dest =
          args->dir.empty() ? default_checkpoint_dir(m, {}) : std::filesystem::path(args->dir);
      if (std::filesystem::exists(std::filesystem::symlink_status(dest))) {
        uint64_t total = 0;
        for (const auto& f : m.files) total += f.size;
        Progress progress("verify " + m.name, total);
        const VerifyReport r = verify_directory(dest, m, [&](uint64_t n) { progress.add(n); });
        progress.finish();
        if (!r.ok()) {
          for (const auto& p : r.problems)
            std::fprintf(stderr, "drama fetch: %s: %s\n", p.path.c_str(), p.reason.c_str());
          std::fprintf(stderr,
                       "drama fetch: %s exists and does not match manifest '%s' (%zu of %zu "
                       "files bad); it was left untouched\n",
                       dest.c_str(), m.name.c_str(), r.problems.size(), m.files.size());
          return 1;
        }
        std::printf("already present and verified: %s (%s)\n", dest.c_str(),
                    sel.provenance.c_str());
        return 0;
      }
      FetchOptions o;
      o.endpoint = args->endpoint;
      const CheckpointSource source = checkpoint_source(m, sel.pinned);
      materialize_checkpoint(m, source, dest, o);
      std::printf("%s and verified: %s (%s)\n",
                  source == CheckpointSource::regenerate_mini ? "regenerated" : "downloaded",
                  dest.c_str(), sel.provenance.c_str());
      return 0;
    };
  });
}

}  // namespace drama::cli
