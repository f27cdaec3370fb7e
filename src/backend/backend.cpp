#include "backend/backend.h"

#include <sched.h>

#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "util/error.h"

namespace drama {

#ifdef DRAMA_WITH_CUDA
// Provided by src/backend/cuda/ when the CUDA backend is built.
bool cuda_device_present();
std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options);
#endif

int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

std::unique_ptr<Backend> make_backend(const BackendOptions& options) {
  if (options.threads < 0)
    throw UsageError("--threads must be 0 (all cores) or positive, not " +
                     std::to_string(options.threads) + ".");
  const std::string& kind = options.kind;
  if (kind != "auto" && kind != "cpu" && kind != "cuda")
    throw UsageError("--backend must be auto, cpu or cuda, not '" + kind + "'.");
#ifdef DRAMA_WITH_CUDA
  if (kind == "cuda" || (kind == "auto" && cuda_device_present()))
    return make_cuda_backend(options);
#else
  if (kind == "cuda") throw Error("drama was built without the CUDA backend (--backend cuda).");
#endif
  const int threads = options.threads > 0 ? options.threads : available_cores();
  if (options.min_split_work >= 0)
    return std::make_unique<cpu::CpuBackend>(threads, cpu::select_isa(), options.min_split_work);
  return std::make_unique<cpu::CpuBackend>(threads, cpu::select_isa());
}

}  // namespace drama
