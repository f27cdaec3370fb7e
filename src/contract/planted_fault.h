// Test-only: plants a fault into one registered kernel so a test can watch the contract name that
// kernel and gate (`drama contract --plant-fault KERNEL:gate2`). Never used in a normal run.
#pragma once

#include <string>

#include "contract/contract.h"

namespace drama::contract {

// spec = "KERNEL:gate1" (leaves the last output element unwritten), "KERNEL:gate2" (perturbs one
// element well beyond its bound) or "KERNEL:gate4" (a last-bit change when the batch has more
// than one row, in the cases that are not exact).
void plant_fault(Registry& registry, const std::string& spec);

}  // namespace drama::contract
