// Python tools on the system python (numpy, torch 1.13): tools/eval/test_eval.py (the cloning
// check's speaker classifier and tools/eval/speaker_check.py on a small synthetic corpus) and
// bench/test_torch_baselines.py (the plain PyTorch step of bench/torch_baselines.py equals the
// reference model's backbone step on a tiny checkpoint) and tools/corpus/test_corpus.py (the
// WordNet sentences and glosses, synth.py's plan, a small synthesis where festival and espeak-ng
// are installed) and bench/test_graph_timeline.py (the graphed step's split from a node-level
// trace, on a hand-made trace database). A few seconds each.
#include <gtest/gtest.h>

#include "model/model_testing.h"

namespace drama {
namespace {

using namespace drama::testing;

void run_python_tests(const std::string& script) {
  const CommandResult r = run_command(quote(python()) + " " + quote(source_dir() + "/" + script));
  std::printf("%s\n", r.output.c_str());
  EXPECT_EQ(r.status, 0) << r.output;
}

TEST(PythonTools, EvalSelfTestsPass) {
  run_python_tests("tools/eval/test_eval.py");
}

TEST(PythonTools, TorchBaselinePlainStepEqualsTheReference) {
  run_python_tests("bench/test_torch_baselines.py");
}

TEST(PythonTools, CorpusSelfTestsPass) {
  run_python_tests("tools/corpus/test_corpus.py");
}

TEST(PythonTools, GraphTimelineSelfTestsPass) {
  run_python_tests("bench/test_graph_timeline.py");
}

}  // namespace
}  // namespace drama
