#include "backend/cpu/isa.h"

#include <cstdlib>
#include <string>

#include "util/error.h"

namespace drama::cpu {

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar:
      return "scalar";
    case Isa::Avx2:
      return "avx2";
    case Isa::Avx512:
      return "avx512";
  }
  return "?";
}

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::Scalar:
      return true;
    case Isa::Avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::Avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  }
  return false;
}

Isa select_isa() {
  const char* forced = std::getenv("DRAMA_CPU_ISA");
  if (forced && *forced) {
    const std::string v = forced;
    Isa isa;
    if (v == "scalar")
      isa = Isa::Scalar;
    else if (v == "avx2")
      isa = Isa::Avx2;
    else if (v == "avx512")
      isa = Isa::Avx512;
    else
      throw Error("DRAMA_CPU_ISA must be scalar, avx2 or avx512, not '" + v + "'.");
    if (!isa_supported(isa)) throw Error("DRAMA_CPU_ISA=" + v + " is not supported by this CPU.");
    return isa;
  }
  if (isa_supported(Isa::Avx512)) return Isa::Avx512;
  if (isa_supported(Isa::Avx2)) return Isa::Avx2;
  return Isa::Scalar;
}

}  // namespace drama::cpu
