// tools/eval/ on the system python (numpy only): the cloning check's speaker classifier and
// tools/eval/speaker_check.py on a small synthetic corpus (tools/eval/test_eval.py, a few s).
#include <gtest/gtest.h>

#include "model/model_testing.h"

namespace drama {
namespace {

using namespace drama::testing;

TEST(EvalTools, SelfTestsPass) {
  const CommandResult r =
      run_command(quote(python()) + " " + quote(source_dir() + "/tools/eval/test_eval.py"));
  std::printf("%s\n", r.output.c_str());
  EXPECT_EQ(r.status, 0) << r.output;
}

}  // namespace
}  // namespace drama
