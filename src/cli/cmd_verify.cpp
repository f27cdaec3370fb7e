// `drama verify DIR --manifest FILE` (interfaces.md, spec section 9): size first, then SHA-256 of
// every listed file; one line per bad or missing file; exit 0 only if every file matches.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "format/manifest.h"
#include "util/progress.h"

namespace drama::cli {

void register_verify(CLI::App& app, Runner& run) {
  auto* sub = app.add_subcommand("verify", "Verify a checkpoint directory against a manifest");
  struct Args {
    std::string dir, manifest;
  };
  auto args = std::make_shared<Args>();
  sub->add_option("DIR", args->dir, "Checkpoint directory")->required();
  sub->add_option("--manifest", args->manifest, "Manifest JSON file")->required();
  sub->callback([&run, args] {
    run = [args] {
      const Manifest m = load_manifest(args->manifest);
      uint64_t total = 0;
      for (const auto& f : m.files) total += f.size;
      Progress progress("verify " + m.name, total);
      const VerifyReport r = verify_directory(args->dir, m, [&](uint64_t n) { progress.add(n); });
      progress.finish();
      for (const auto& p : r.problems)
        std::fprintf(stderr, "drama verify: %s: %s\n", p.path.c_str(), p.reason.c_str());
      if (!r.ok()) {
        std::fprintf(stderr, "drama verify: %zu of %zu files bad against manifest '%s'\n",
                     r.problems.size(), m.files.size(), m.name.c_str());
        return 1;
      }
      std::printf("ok: %zu files, %llu bytes match manifest '%s' (%s@%s)\n", m.files.size(),
                  static_cast<unsigned long long>(r.bytes_hashed), m.name.c_str(), m.repo.c_str(),
                  m.revision.c_str());
      return 0;
    };
  });
}

}  // namespace drama::cli
