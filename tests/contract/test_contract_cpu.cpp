// labels: contract
// The whole contract on the CPU backend: every kernel passes gates 1-4, every control is red as
// planted, no limit problem. (CI also runs `drama contract --backend cpu` through this test.)
#include <gtest/gtest.h>

#include <iostream>
#include <sstream>

#include "contract/contract.h"

namespace drama::contract {
namespace {

TEST(ContractCpu, FullRunPasses) {
  Options o;
  // Under the sanitizers the limits measure the instrumentation, not the kernels.
  if (std::getenv("DRAMA_CONTRACT_NO_LIMITS")) o.run_limits = false;
  std::ostringstream out;
  Report r = run_contract(o, out);
  std::cout << out.str();
  EXPECT_TRUE(r.ok) << r.summary;
}

}  // namespace
}  // namespace drama::contract
