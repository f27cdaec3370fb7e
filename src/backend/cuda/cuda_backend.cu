// CudaBackend: device, stream, memory and weight residency (docs/cuda-backend.md). The kernels
// live in one .cu/.cuh pair per family beside this file.
#include "backend/cuda/cuda_backend.cuh"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <nvtx3/nvToolsExt.h>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/grouped_experts.h"
#include "backend/cuda/linear.cuh"
#include "backend/cuda/moe.cuh"
#include "util/error.h"

namespace drama {

// Declared in src/backend/backend.cpp and src/engine/engine.cpp (which include no CUDA header).
bool cuda_device_present() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // a missing driver is "no device", not a sticky error
    return false;
  }
  if (count < 1) return false;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return false;
  return prop.major >= 9;  // the kernels are built for sm_90 (Hopper) and newer
}

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& /*options*/) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count < 1) {
    (void)cudaGetLastError();
    throw Error(std::string("--backend cuda: no usable CUDA device (") +
                (status != cudaSuccess ? cudaGetErrorString(status) : "no device found") + ").");
  }
  cudaDeviceProp prop{};
  cuda::check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  if (prop.major < 9)
    throw Error("--backend cuda: device 0 (" + std::string(prop.name) + ", compute capability " +
                std::to_string(prop.major) + "." + std::to_string(prop.minor) +
                ") is older than the sm_90 (Hopper) the CUDA backend is built for.");
  return std::make_unique<cuda::CudaBackend>(0);
}

namespace cuda {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw Error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(status) + ".");
}

namespace {

// time_each_kernel's state (one at a time: the bench's thread drives one backend). While `on`,
// every check_launch closes the timing of the kernel just queued and arms the next: a spinning
// kernel holds the stream, `start` is recorded behind it, and the host queues the next kernel
// while the GPU still spins, so start -> stop brackets that kernel alone (no launch latency).
struct KernelTimer {
  bool on = false;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  std::chrono::steady_clock::time_point armed_at;
  std::vector<KernelTime> times;
  int64_t late = 0;  // kernels queued after the spin had ended (their time includes the wait)
};
KernelTimer g_timer;

// Spins for about `ns` nanoseconds of the device's global timer.
__global__ void spin_kernel(uint64_t ns) {
  uint64_t t0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  for (;;) {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (t - t0 >= ns) break;
  }
}

constexpr uint64_t kSpinNs = 200000;  // the host's gap between two launches stays well under this

void arm_timer() {
  spin_kernel<<<1, 32, 0, g_timer.stream>>>(kSpinNs);
  check(cudaGetLastError(), "spin_kernel");
  check(cudaEventRecord(g_timer.start, g_timer.stream), "cudaEventRecord");
  g_timer.armed_at = std::chrono::steady_clock::now();
}

bool pdl_from_environment() {
  const char* v = std::getenv("DRAMA_CUDA_PDL");
  return !(v && std::string(v) == "0");
}
std::atomic<bool> g_pdl{pdl_from_environment()};

}  // namespace

bool programmatic_launch() {
  return g_pdl.load(std::memory_order_relaxed);
}

bool timing_kernels() {
  return g_timer.on;
}

void check_launch(const char* kernel) {
  check(cudaGetLastError(), kernel);
  if (!g_timer.on) return;
  const auto queued = std::chrono::steady_clock::now();
  check(cudaEventRecord(g_timer.stop, g_timer.stream), "cudaEventRecord");
  check(cudaEventSynchronize(g_timer.stop), "cudaEventSynchronize");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, g_timer.start, g_timer.stop), "cudaEventElapsedTime");
  if (std::chrono::duration<double, std::nano>(queued - g_timer.armed_at).count() > 0.8 * kSpinNs)
    ++g_timer.late;
  g_timer.times.push_back({kernel, ms * 1e3});
  arm_timer();
}

double median_replay_seconds(cudaGraphExec_t exec, cudaStream_t stream, int replays) {
  cudaEvent_t t0, t1;
  cudaError_t status = cudaEventCreate(&t0);
  if (status == cudaSuccess && (status = cudaEventCreate(&t1)) != cudaSuccess)
    (void)cudaEventDestroy(t0);
  if (status != cudaSuccess) {
    (void)cudaGraphExecDestroy(exec);
    check(status, "cudaEventCreate");
  }
  std::vector<float> ms;
  for (int i = 0; i < replays + 3 && status == cudaSuccess; ++i) {
    float v = 0;
    if ((status = cudaEventRecord(t0, stream)) != cudaSuccess ||
        (status = cudaGraphLaunch(exec, stream)) != cudaSuccess ||
        (status = cudaEventRecord(t1, stream)) != cudaSuccess ||
        (status = cudaEventSynchronize(t1)) != cudaSuccess ||
        (status = cudaEventElapsedTime(&v, t0, t1)) != cudaSuccess)
      break;
    if (i >= 3) ms.push_back(v);  // three warm-up replays
  }
  (void)cudaEventDestroy(t0);
  (void)cudaEventDestroy(t1);
  (void)cudaGraphExecDestroy(exec);
  check(status, "a timed graph replay");
  std::sort(ms.begin(), ms.end());
  return ms.empty() ? 0.0 : ms[ms.size() / 2] * 1e-3;
}

namespace {

class CudaBuffer final : public DeviceBuffer {
 public:
  explicit CudaBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes) check(cudaMalloc(&data_, bytes), "cudaMalloc");
  }
  ~CudaBuffer() override {
    if (data_) (void)cudaFree(data_);
  }
  void* data() override { return data_; }
  size_t bytes() const override { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_;
};

}  // namespace

CudaBackend::CudaBackend(int device) : device_(device) {
  check(cudaSetDevice(device_), "cudaSetDevice");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device_), "cudaGetDeviceProperties");
  name_ = "cuda (" + std::string(prop.name) + ", sm_" + std::to_string(prop.major) +
          std::to_string(prop.minor) + ")";
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  if (const char* v = std::getenv("DRAMA_CUDA_GRAPHS")) {
    const std::string s = v;
    if (s == "0")
      graphs_ = false;
    else if (s != "1" && !s.empty())
      throw Error("DRAMA_CUDA_GRAPHS=" + s + ": 0 or 1");
  }
  // The grouped expert kernels (moe.cuh): version 3 (tensor cores) unless DRAMA_CUDA_EXPERTS says
  // v1 or v2. On the H200 version 3 holds 96 streams of bench-30b-a3b faster than real time where
  // version 2 holds 64, for a batch-1 step 1.13x version 2's (2026-12-04:
  // results/lanes-h200-1827.json, lanes-v2-h200-1827.json, docs/cuda-backend.md). Version 2 was the
  // default from 2026-12-02 to 2026-12-04 (v2 == v1 bitwise and 1.45-1.8x faster:
  // results/experts-v1-v2-h200.json).
  if (const char* v = std::getenv("DRAMA_CUDA_EXPERTS")) {
    const std::string s = v;
    if (s == "v1" || s == "1")
      experts_version_ = 1;
    else if (s == "v2" || s == "2")
      experts_version_ = 2;
    else if (s == "v3" || s == "3")
      experts_version_ = 3;
    else if (!s.empty())
      throw Error("DRAMA_CUDA_EXPERTS=" + s + ": v1, v2 or v3");
  }
  // The BF16 product kernel is chosen process-wide (linear.cuh); a bad DRAMA_CUDA_LINEAR is
  // refused here, with the backend.
  check_linear_environment();
  check_attention_environment();
  check_experts_environment();
}

CudaBackend::~CudaBackend() {
  (void)cudaStreamSynchronize(stream_);
  forget_captured();
  resident_.clear();
  scratch_.reset();
  counters_.reset();
  expert_tables_.clear();
  (void)cudaStreamDestroy(stream_);
}

std::string CudaBackend::name() const {
  return name_;
}

void CudaBackend::replace_area(std::unique_ptr<DeviceBuffer>& area, size_t bytes) {
  // The old area may still be read by queued kernels, and captured graphs name it.
  synchronize();
  forget_captured();
  ++scratch_generation_;
  area = std::make_unique<CudaBuffer>(bytes + bytes / 2);
}

void* CudaBackend::scratch(size_t bytes) {
  if (!scratch_ || scratch_->bytes() < bytes) replace_area(scratch_, bytes);
  return scratch_->data();
}

unsigned* CudaBackend::counters(size_t n) {
  const size_t bytes = n * sizeof(unsigned);
  if (!counters_ || counters_->bytes() < bytes) {
    replace_area(counters_, bytes);
    check(cudaMemset(counters_->data(), 0, counters_->bytes()), "cudaMemset (counters)");
  }
  return static_cast<unsigned*>(counters_->data());
}

std::unique_ptr<DeviceBuffer> CudaBackend::alloc_impl(size_t bytes) {
  return std::make_unique<CudaBuffer>(bytes);
}

void CudaBackend::upload_impl(void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  // From pageable memory the copy has been staged when the call returns, so the caller may
  // reuse `src` at once; kernels queued before it run first.
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "upload");
}

void CudaBackend::download_impl(void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "download");
  synchronize();
}

LinearWeight CudaBackend::resident(const LinearWeight& host) {
  LinearWeight dev = host;
  const size_t data_bytes = host.format == WeightFormat::NVFP4
                                ? static_cast<size_t>(host.out * host.in / 2)
                                : static_cast<size_t>(host.out * host.in) * 2;
  dev.data = resident_bytes(host.data, data_bytes);
  if (host.format == WeightFormat::NVFP4)
    dev.scales = static_cast<const uint8_t*>(
        resident_bytes(host.scales, static_cast<size_t>(host.out * host.in / 16)));
  return dev;
}

const void* CudaBackend::resident_bytes(const void* host, size_t bytes) {
  auto buf = std::make_unique<CudaBuffer>(bytes);
  upload(buf->data(), host, bytes);
  resident_.push_back(std::move(buf));
  return resident_.back()->data();
}

void CudaBackend::forget_captured() {
  for (auto& [key, c] : captured_)
    if (c.exec) (void)cudaGraphExecDestroy(c.exec);  // a launched graph completes first
  captured_.clear();
}

bool CudaBackend::run_captured_impl(const std::string& key, const std::function<void()>& work) {
  if (!graphs_) {
    work();
    return false;
  }
  Captured& c = captured_[key];
  if (c.exec) {
    check(cudaGraphLaunch(c.exec, stream_), "cudaGraphLaunch");
    return true;
  }
  if (failed_.count(key) || c.runs++ == 0) {
    work();
    return false;
  }
  const uint64_t generation = scratch_generation_;
  check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal),
        "cudaStreamBeginCapture");
  std::string why;  // why the capture failed ("" while it has not)
  try {
    work();
  } catch (const std::exception& e) {  // an operation a capture refuses, or a real error
    why = e.what();
  } catch (...) {  // whatever it is, the stream must leave capture mode
    why = "an exception that is not a std::exception";
  }
  cudaGraph_t graph = nullptr;
  cudaError_t status = cudaStreamEndCapture(stream_, &graph);
  cudaGraphExec_t exec = nullptr;
  if (why.empty() && status != cudaSuccess) why = cudaGetErrorString(status);
  if (why.empty() && generation != scratch_generation_) why = "the scratch area moved";
  size_t nodes = 0;
  if (why.empty()) {
    status = cudaGraphInstantiate(&exec, graph, 0);
    if (status != cudaSuccess) why = cudaGetErrorString(status);
    if (why.empty() && cudaGraphGetNodes(graph, nullptr, &nodes) != cudaSuccess) nodes = 0;
  }
  if (graph) (void)cudaGraphDestroy(graph);
  if (!why.empty()) {
    // Nothing of `work` ran on the device: say why once and run it as it comes (a real error
    // then throws from there).
    (void)cudaGetLastError();
    if (exec) (void)cudaGraphExecDestroy(exec);
    failed_.insert(key);  // kept by forget_captured: a failed key is not tried again
    std::fprintf(stderr, "drama: CUDA graph capture of %s failed (%s); it runs without a graph\n",
                 key.c_str(), why.c_str());
    work();
    return false;
  }
  captured_[key].exec = exec;
  captured_[key].nodes = static_cast<int64_t>(nodes);
  check(cudaGraphLaunch(exec, stream_), "cudaGraphLaunch");
  return false;  // `work` ran on the host (its counts are made); the device ran the graph
}

void CudaBackend::synchronize() {
  check(cudaStreamSynchronize(stream_), "a kernel on the CUDA stream");
}

namespace {

CudaBackend& cuda_of(Backend& backend) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  if (!cuda) throw Error("a CUDA graph measurement needs the CUDA backend, not " + backend.name());
  return *cuda;
}

__global__ void empty_kernel() {}

}  // namespace

int64_t captured_graph_nodes(Backend& backend, const std::string& key) {
  return cuda_of(backend).graph_nodes(key);
}

void push_range(const char* name) {
  nvtxRangePushA(name);
}

void pop_range() {
  nvtxRangePop();
}

double time_empty_kernel_chain(Backend& backend, int64_t kernels, int replays) {
  CudaBackend& cuda = cuda_of(backend);
  if (kernels <= 0) return 0.0;
  cuda.synchronize();
  cudaStream_t stream = cuda.stream();
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  for (int64_t i = 0; i < kernels; ++i) empty_kernel<<<1, 32, 0, stream>>>();
  const cudaError_t launched = cudaGetLastError();
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  cudaError_t made = launched != cudaSuccess ? launched : ended;
  if (made == cudaSuccess) made = cudaGraphInstantiate(&exec, graph, 0);
  if (graph) (void)cudaGraphDestroy(graph);
  check(made, "the empty-kernel chain's graph");
  return median_replay_seconds(exec, stream, replays);
}

bool set_programmatic_launch(Backend& backend, bool on) {
  CudaBackend& cuda = cuda_of(backend);
  cuda.synchronize();
  const bool before = programmatic_launch();
  if (before != on) {
    g_pdl.store(on, std::memory_order_relaxed);
    cuda.forget_captured();  // graphs captured the launches as they were
  }
  return before;
}

// Sets a process-wide kernel choice through `set` (which returns the previous one) with the
// backend idle, and drops its graphs where the choice changed (they captured the other kernel).
template <typename T>
T switch_kernel(Backend& backend, T choice, T (*set)(T)) {
  CudaBackend& cuda = cuda_of(backend);
  cuda.synchronize();
  const T before = set(choice);
  if (before != choice) cuda.forget_captured();
  return before;
}

int set_attention_version(Backend& backend, int version) {
  return switch_kernel(backend, version, set_attention_version_flag);
}

int set_attention_quad(Backend& backend, int quad) {
  return switch_kernel(backend, quad, set_attention_quad_flag);
}

int64_t set_wide_rows(Backend& backend, int64_t rows) {
  return switch_kernel(backend, rows, set_wide_rows_flag);
}

bool set_tensor_linear(Backend& backend, bool on) {
  return switch_kernel(backend, on, set_tensor_linear_flag);
}

bool set_linear_staged(Backend& backend, bool on) {
  return switch_kernel(backend, on, set_linear_staged_flag);
}

bool set_linear_lean(Backend& backend, bool on) {
  return switch_kernel(backend, on, set_linear_lean_flag);
}

bool set_linear_split(Backend& backend, bool on) {
  return switch_kernel(backend, on, set_linear_split_flag);
}

int64_t set_linear_wide_rows(Backend& backend, int64_t rows) {
  return switch_kernel(backend, rows, set_linear_wide_rows_flag);
}

bool set_split_ahead(Backend& backend, bool on) {
  return switch_kernel(backend, on, set_split_ahead_flag);
}

int set_v3_down_tiles(Backend& backend, int tiles) {
  return switch_kernel(backend, tiles, set_v3_down_tiles_flag);
}

KernelTimes time_each_kernel(Backend& backend, const std::function<void()>& work) {
  CudaBackend& cuda = cuda_of(backend);
  if (g_timer.on) throw Error("time_each_kernel: already timing");
  cuda.synchronize();
  check(cudaEventCreate(&g_timer.start), "cudaEventCreate");
  check(cudaEventCreate(&g_timer.stop), "cudaEventCreate");
  g_timer.stream = cuda.stream();
  g_timer.times.clear();
  g_timer.late = 0;
  g_timer.on = true;
  const bool graphs = cuda.set_graphs(false);
  KernelTimes result;
  try {
    arm_timer();
    // The floor of this timing: empty kernels timed the same way.
    constexpr int kEmpty = 16;
    for (int i = 0; i < kEmpty; ++i) {
      empty_kernel<<<1, 32, 0, g_timer.stream>>>();
      check_launch("empty kernel");
    }
    std::vector<double> empty;
    for (const auto& t : g_timer.times) empty.push_back(t.us);
    std::sort(empty.begin(), empty.end());
    result.empty_kernel_us = empty[empty.size() / 2];
    g_timer.times.clear();
    work();
    cuda.synchronize();
  } catch (...) {
    g_timer.on = false;
    cuda.set_graphs(graphs);
    (void)cudaEventDestroy(g_timer.start);
    (void)cudaEventDestroy(g_timer.stop);
    throw;
  }
  g_timer.on = false;
  cuda.set_graphs(graphs);
  (void)cudaEventDestroy(g_timer.start);
  (void)cudaEventDestroy(g_timer.stop);
  result.kernels = std::move(g_timer.times);
  result.late = g_timer.late;
  return result;
}

}  // namespace cuda
}  // namespace drama
