// labels: slow
// `drama bench decode --synthetic ... --lanes LIST --stop-below-real-time` through the binary
// (slow: 2048 lanes of the tiny model, about 16 s in Release; left out of the sanitizer run): the
// lane counts run in increasing order, and those after the first whose streams are slower than
// real time are listed as skipped, not run. What is asserted holds whatever the machine's speed:
// which count is the first slow one is the machine's, the order and the bookkeeping are not.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "support/drama_cli.h"
#include "support/scratch_dir.h"

namespace drama {
namespace {

using testing::quote;
using testing::run_drama;

TEST(BenchDecodeCli, StopBelowRealTimeRunsLanesInIncreasingOrderAndListsTheSkippedOnes) {
  testing::ScratchDir dir("bench-decode-cli");
  const std::string config = std::string(std::getenv("DRAMA_SOURCE_DIR")) + "/configs/tiny.json";
  // 2048 lanes of the tiny model take about 160 ms a step on two cores (12.5 frames/s needs 80;
  // 1024 lanes took 80 ms, too close to call): the first slow count, so 4096 is skipped; a machine
  // twice as fast runs 4096 too.
  const testing::CliResult r = run_drama(
      "bench decode --synthetic " + quote(config) +
          " --lanes 4096,1,2048,1 --stop-below-real-time --frames 1 --repeats 1 --context 128"
          " --prefill-chunk 65536 --threads 2 --json out.json",
      dir.path());
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(read_text_file(dir / "out.json"));
  std::vector<int64_t> run,
      skipped = j.at("lanes_skipped_below_real_time").get<std::vector<int64_t>>();
  for (const auto& x : j.at("runs")) run.push_back(x.at("lanes").get<int64_t>());
  ASSERT_FALSE(run.empty());
  EXPECT_TRUE(std::is_sorted(run.begin(), run.end()));
  EXPECT_EQ(std::set<int64_t>(run.begin(), run.end()).size(), run.size()) << "1 given twice";
  std::vector<int64_t> all = run;
  all.insert(all.end(), skipped.begin(), skipped.end());
  EXPECT_EQ(all, (std::vector<int64_t>{1, 2048, 4096}));
  const auto& runs = j.at("runs");
  for (size_t i = 0; i + 1 < runs.size(); ++i)
    EXPECT_GE(runs[i].at("stream_real_time_factor").get<double>(), 1.0)
        << "a count slower than real time was followed by another";
  if (!skipped.empty()) {
    EXPECT_LT(runs.back().at("stream_real_time_factor").get<double>(), 1.0)
        << "counts were skipped after one faster than real time";
  }
  // A sample's progress line on stderr per lane count run.
  EXPECT_EQ(testing::count_lines(r.err), static_cast<int>(run.size())) << r.err;
}

// The backbone step at more rows than the bench's prompt (a busy server's steps, up to 512): the
// workspace is reserved for them before the captured steps (a capture may not allocate), and a
// count past 512 is refused by the command line.
TEST(BenchDecodeCli, StepRowsBeyondThePromptRunAsGraphs) {
  testing::ScratchDir dir("bench-decode-step-rows");
  const std::string config = std::string(std::getenv("DRAMA_SOURCE_DIR")) + "/configs/tiny.json";
  const testing::CliResult r =
      run_drama("bench decode --synthetic " + quote(config) +
                    " --step-rows 8,100 --frames 1 --repeats 1 --threads 2 --json out.json",
                dir.path());
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(read_text_file(dir / "out.json"));
  const auto& steps = j.at("backbone_step");
  for (const char* name : {"batch1", "rows_8_graph", "rows_100_graph"})
    EXPECT_TRUE(steps.contains(name)) << name;
  EXPECT_EQ(steps.at("rows_100_graph").at("rows").get<int64_t>(), 100);
  // The paired step with its two rows identical routes both rows alike: on the CPU (which counts
  // the experts it runs) it reads exactly batch 1's weights, where the plain paired step, whose
  // rows route apart, reads more.
  const auto bytes = [&](const char* name) {
    return steps.at(name).at("weight_bytes_per_step").get<uint64_t>();
  };
  EXPECT_EQ(bytes("paired_batch2_same_routing_graph"), bytes("batch1"));
  EXPECT_GT(bytes("paired_batch2"), bytes("batch1"));
  EXPECT_TRUE(j.at("paired_batch2_uniform_routing").contains("measured_graph_ratio_same_routing"));
  const testing::CliResult refused = run_drama(
      "bench decode --synthetic " + quote(config) + " --step-rows 513 --frames 1", dir.path());
  EXPECT_NE(refused.status, 0);
  EXPECT_NE(refused.err.find("513"), std::string::npos) << refused.err;
}

}  // namespace
}  // namespace drama
