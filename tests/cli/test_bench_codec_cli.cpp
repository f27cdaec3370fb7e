// `drama bench codec --weights NAME`: the codec of a shipped pinned checkpoint (verified, as every
// command loads it) instead of the random codec at the Mimi geometry: the receipt names the
// checkpoint's provenance and reports its geometry; streamed and whole decodes agree, and so do
// streams decoded in shared passes (--streams).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "support/drama_cli.h"
#include "support/scratch_dir.h"

namespace drama {
namespace {

using testing::run_drama;

TEST(BenchCodecCli, WeightsBenchTheCheckpointsCodec) {
  testing::ScratchDir dir("bench-codec-cli");
  // Its own cache (the mini checkpoint is made there) and so its own device locks: the default
  // lock of the cpu device is held by whatever else runs at the time (first found under ctest -j2).
  const std::string env = "DRAMA_CACHE=" + testing::quote((dir.path() / "cache").string()) + " ";
  const testing::CliResult r = run_drama(
      "bench codec --weights mini --frames 3 --streams 1,3 --json out.json", dir.path(), env);
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(read_text_file(dir / "out.json"));
  const nlohmann::json& g = j.at("geometry");
  EXPECT_EQ(g.at("weights").get<std::string>().rfind("pinned:", 0), 0u) << g.dump();
  EXPECT_EQ(g.at("num_codebooks").get<int64_t>(), 8) << g.dump();
  EXPECT_DOUBLE_EQ(g.at("frame_rate").get<double>(), 12.5);
  EXPECT_TRUE(j.at("streamed_equals_whole").get<bool>());
  // Streams decoded in shared passes, each equal to the stream alone.
  const nlohmann::json& passes = j.at("shared_passes");
  ASSERT_EQ(passes.size(), 2u) << passes.dump();
  EXPECT_EQ(passes[1].at("streams").get<int64_t>(), 3);
  for (const auto& p : passes) EXPECT_TRUE(p.at("each_equals_alone").get<bool>()) << p.dump();
  EXPECT_NEAR(j.at("audio_seconds").get<double>(), 3 / 12.5, 1e-9);

  const testing::CliResult bad =
      run_drama("bench codec --weights no-such-model --frames 3", dir.path(), env);
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.err.find("no-such-model"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace drama
