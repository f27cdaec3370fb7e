// Accepted deviations from the contract, each with its reason (spec contract.md "Known findings").
// Keep this list short and reviewed: an entry turns a gate failure into a reported known finding.
#pragma once

#include <string>

namespace drama::contract {

struct KnownFinding {
  const char* kernel;
  int gate;
  const char* reason;
};

// Returns the accepted finding for (kernel, gate), or nullptr.
const KnownFinding* find_known_finding(const std::string& kernel, int gate);

}  // namespace drama::contract
