// Instruction-set paths of the CPU kernels. Each SIMD path lives in its own file compiled with
// per-function target attributes, so one binary runs everywhere and picks at run time.
#pragma once

#include <string_view>

namespace drama::cpu {

enum class Isa { Scalar, Avx2, Avx512 };

std::string_view isa_name(Isa isa);
bool isa_supported(Isa isa);  // by this CPU
// The best supported path, or the one DRAMA_CPU_ISA=scalar|avx2|avx512 forces (an unknown or
// unsupported value throws drama::Error naming the variable).
Isa select_isa();

}  // namespace drama::cpu
