#include "contract/planted_fault.h"

#include <cmath>
#include <limits>

#include "util/error.h"

namespace drama::contract {

void plant_fault(Registry& registry, const std::string& spec) {
  const auto colon = spec.find(':');
  const std::string kernel = spec.substr(0, colon);
  const std::string gate = colon == std::string::npos ? "gate2" : spec.substr(colon + 1);
  if (gate != "gate1" && gate != "gate2" && gate != "gate4" && gate != "limit")
    throw UsageError("--plant-fault " + spec + ": the gate must be gate1, gate2, gate4 or limit");
  for (KernelSpec& k : registry.kernels) {
    if (k.name != kernel) continue;
    if (gate == "limit") {
      // A kernel one second slower than it is, on every attempt: the limit must stay a problem.
      auto timed = k.limit.time_call;
      if (!timed) throw UsageError("--plant-fault " + spec + ": that kernel has no limit");
      k.limit.time_call = [timed](Backend& b) { return timed(b) + 1.0; };
      return;
    }
    auto inner = k.make_cases;
    k.make_cases = [inner, gate](uint64_t seed) {
      std::vector<KernelCase> cases = inner(seed);
      for (KernelCase& c : cases) {
        // A batch-dependent last bit is an accuracy failure in exact mode: plant gate 4 faults
        // only where the tolerance admits them, so the gate named is the one planted.
        if (gate == "gate4" && c.exact) continue;
        auto run = c.run;
        const int64_t row_elems = c.row_elems;
        c.run = [run, gate, row_elems](Backend& b, int64_t r0, int64_t n, float* out) {
          const bool ok = run(b, r0, n, out);
          const int64_t last = n * row_elems - 1;
          float v;
          b.download(&v, out + last, sizeof v);
          if (gate == "gate1") {
            v = std::numeric_limits<float>::quiet_NaN();
          } else if (gate == "gate2") {
            v = v * 1.5f + 1.0f;
          } else if (n > 1) {
            v = std::nextafter(v, INFINITY);
          }
          b.upload(out + last, &v, sizeof v);
          return ok;
        };
      }
      return cases;
    };
    return;
  }
  throw UsageError("--plant-fault " + spec + ": no registered kernel is named '" + kernel + "'");
}

}  // namespace drama::contract
