// labels: parity
// tools/train/ on CPU (system torch 1.13): its layouts equal make-checkpoint's tensors, its batched
// forward gives the reference's logits, its codec decodes as the reference's, and a few steps of
// every stage run, resume and export a checkpoint that `drama quantize` and `drama say` load, and
// tools/train/bundle.py makes a bundled model with built-in voices of it
// (tools/train/test_train.py, about 20 s).
#include <gtest/gtest.h>

#include "model/model_testing.h"

namespace drama {
namespace {

using namespace drama::testing;

TEST(TrainSmoke, TrainingSelfTestsPass) {
  const std::string cmd = "DRAMA_BIN=" + quote(drama_bin()) + " " + quote(python()) + " " +
                          quote(source_dir() + "/tools/train/test_train.py");
  const CommandResult r = run_command(cmd);
  std::printf("%s\n", r.output.c_str());
  EXPECT_EQ(r.status, 0) << r.output;
}

}  // namespace
}  // namespace drama
