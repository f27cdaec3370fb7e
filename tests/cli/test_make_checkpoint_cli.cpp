// `drama make-checkpoint` through the real binary (DRAMA_BIN): exit codes and refusals.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace {

namespace fs = std::filesystem;

std::string env(const char* name, const std::string& fallback = "") {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

// Runs a shell command line; returns the exit status.
int run(const std::string& cmd) {
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

class MakeCheckpointCli : public ::testing::Test {
 protected:
  void SetUp() override {
    bin_ = env("DRAMA_BIN");
    if (bin_.empty()) GTEST_SKIP() << "DRAMA_BIN is not set";
    src_ = env("DRAMA_SOURCE_DIR", fs::path(__FILE__).parent_path().parent_path().parent_path());
    tmp_ = fs::path(env("DRAMA_TEST_TMP", fs::temp_directory_path())) /
           ("make-checkpoint-cli-" + std::to_string(::getpid()));
    fs::remove_all(tmp_);
    fs::create_directories(tmp_);
  }
  void TearDown() override {
    if (!tmp_.empty()) fs::remove_all(tmp_);
  }
  std::string tiny() const { return (fs::path(src_) / "configs/tiny.json").string(); }
  std::string bin_, src_;
  fs::path tmp_;
};

TEST_F(MakeCheckpointCli, WritesTinyNvfp4AndRefusesAnExistingDirectory) {
  const fs::path out = tmp_ / "T";
  const std::string base = bin_ + " make-checkpoint --config " + tiny() + " --seed 1 --nvfp4 -o ";
  ASSERT_EQ(run(base + out.string() + " 2>/dev/null"), 0);
  for (const char* f :
       {"config.json", "hf_quant_config.json", "manifest.json", "model.safetensors.index.json",
        "codec/config.json", "codec/model.safetensors"})
    EXPECT_TRUE(fs::exists(out / f)) << f;
  EXPECT_EQ(run(base + out.string() + " 2>/dev/null"), 2);  // existing -o: never overwritten
}

TEST_F(MakeCheckpointCli, PrunedSlicedCheckpoint) {
  const fs::path out = tmp_ / "P";
  EXPECT_EQ(run(bin_ + " make-checkpoint --config " + tiny() + " --seed 3 --prune-to 4 " +
                "--router-layout sliced -o " + out.string() + " 2>/dev/null"),
            0);
  EXPECT_TRUE(fs::exists(out / "manifest.json"));
}

TEST_F(MakeCheckpointCli, BadArgumentsExitTwo) {
  const std::string base = bin_ + " make-checkpoint --config " + tiny() + " ";
  EXPECT_EQ(run(base + "--seed 1 2>/dev/null"), 2);  // no -o
  EXPECT_EQ(run(base + "--seed 1 --prune-to 1 -o " + (tmp_ / "a").string() + " 2>/dev/null"), 2);
  EXPECT_EQ(
      run(base + "--seed 1 --router-layout diagonal -o " + (tmp_ / "b").string() + " 2>/dev/null"),
      2);
  EXPECT_EQ(run(bin_ + " make-checkpoint --config " + (tmp_ / "nope.json").string() +
                " --seed 1 -o " + (tmp_ / "c").string() + " 2>/dev/null"),
            1);
  EXPECT_FALSE(fs::exists(tmp_ / "a"));
  EXPECT_FALSE(fs::exists(tmp_ / "c"));
}

}  // namespace
