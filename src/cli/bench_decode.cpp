// `drama bench decode`: per-frame decode time of a checkpoint (backbone and tower split) and the
// effective bandwidth of the weight bytes the frame actually reads (attention, dense MLPs, the
// routed experts, heads), against the memory read bandwidth measured in the same run with the
// same thread count (a parallel read of a buffer far larger than the caches, and a copy).
// On a shared VM both figures swing by 20% from one second to the next, so the run takes
// `--repeats` samples, each a decode pass followed at once by a bandwidth measurement, and
// reports the median of the per-sample fractions (and each sample).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include <sys/resource.h>

#include "cli/bench.h"
#include "cli/commands.h"
#include "cli/weights_options.h"
#include "format/checkpoint.h"
#include "model/drama3_model.h"
#include "model/prompt.h"
#include "model/step_limit.h"
#include "util/error.h"
#include "util/sampling.h"

#ifdef DRAMA_WITH_CUDA
#include "backend/cuda/ceilings.h"
#include "backend/cuda/grouped_experts.h"
#endif

namespace drama::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct DecodeOptions {
  std::vector<int64_t> lanes = {1};
  bool lanes_given = false;  // --synthetic: the lanes bench on the whole model (else the step)
  int64_t context = 0;       // positions per branch cache (0: max_position_embeddings)
  int64_t prefill_chunk = ModelCapacity{}.prefill_chunk;  // prompt rows per step
  int64_t frames = 32;
  int repeats = 5;
  bool stop_below_real_time = false;  // lane counts after the first slower than real time: skipped
  std::string cfg = "paired";
  std::string json;
  std::string synthetic;           // a config file: random weights in the backend's memory
  std::vector<int64_t> step_rows;  // --synthetic without --lanes: row counts beyond 1 and 2
  WeightsOptions weights;
};

// Each of `threads` threads runs fn(begin, end) on its slice of [0, n).
template <typename F>
double timed_parallel(int threads, size_t n, F fn) {
  const auto t0 = Clock::now();
  std::vector<std::thread> pool;
  const size_t per = (n / threads) & ~size_t{63};
  for (int t = 0; t < threads; ++t) {
    const size_t b = per * t, e = t == threads - 1 ? n : per * (t + 1);
    pool.emplace_back([=] { fn(b, e); });
  }
  for (auto& th : pool) th.join();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Read and copy bandwidth over two buffers far larger than the caches, allocated and touched
// once and reused by every sample (so samples do not pay 1 GiB of page faults each).
class BandwidthProbe {
 public:
  explicit BandwidthProbe(int threads) : threads_(threads) {
    a_ = static_cast<uint64_t*>(std::aligned_alloc(64, kBytes));
    b_ = static_cast<uint64_t*>(std::aligned_alloc(64, kBytes));
    if (!a_ || !b_) throw Error("bench decode: cannot allocate the bandwidth buffers");
    uint64_t* a = a_;
    uint64_t* b = b_;
    timed_parallel(threads_, kBytes / 8, [a, b](size_t s, size_t e) {
      for (size_t i = s; i < e; ++i) a[i] = i, b[i] = 0;
    });
  }
  ~BandwidthProbe() {
    std::free(a_);
    std::free(b_);
  }
  BandwidthProbe(const BandwidthProbe&) = delete;
  BandwidthProbe& operator=(const BandwidthProbe&) = delete;

  nlohmann::json measure() const {
    const size_t bytes = kBytes, n = bytes / 8;
    const int threads = threads_;
    const uint64_t* a = a_;
    uint64_t* b = b_;
    std::vector<uint64_t> sums(threads * 8);
    double best_read = 1e30, best_copy = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
      best_read = std::min(best_read, timed_parallel(threads, n, [&](size_t s, size_t e) {
                             uint64_t x0 = 0, x1 = 0, x2 = 0, x3 = 0;
                             for (size_t i = s; i + 4 <= e; i += 4)
                               x0 += a[i], x1 += a[i + 1], x2 += a[i + 2], x3 += a[i + 3];
                             sums[(s / std::max<size_t>(1, (n / threads))) % sums.size()] +=
                                 x0 ^ x1 ^ x2 ^ x3;
                           }));
      best_copy = std::min(best_copy, timed_parallel(threads, n, [&](size_t s, size_t e) {
                             std::memcpy(b + s, a + s, (e - s) * 8);
                           }));
    }
    uint64_t keep = 0;
    for (uint64_t s : sums) keep ^= s;
    return {{"buffer_mib", bytes >> 20},
            {"threads", threads},
            {"read_gb_s", bytes / best_read / 1e9},
            {"copy_gb_s", bytes / best_copy / 1e9},
            {"checksum", keep & 1},
            {"note", "best of 5; copy counts bytes copied (each read once and written once)"}};
  }

 private:
  static constexpr size_t kBytes = size_t{512} << 20;
  int threads_;
  uint64_t* a_ = nullptr;
  uint64_t* b_ = nullptr;
};

// What one pass measured.
struct PassResult {
  StepTiming timing;
  std::vector<double> first_frame_s;  // per initial session: from its join to its first frame
  double join_at_load_s = 0;  // a session joining while the others stream: to its first frame
  uint64_t expert_bytes = 0;  // expert weight bytes the backend counted in the timed steps
  nlohmann::json kernels;     // CUDA: one more step's kernels, each timed alone (kernel_table)
};

// `lanes` concurrent sessions of the same prompt (seeds 1, 2, ...) joined at once and stepped
// together until they have made `frames` frames each in steps without prefill. The sessions
// ignore end of speech (GenerationOptions::ignore_eos), so a trained model that ends a short
// sentence after a few frames still keeps every lane streaming; a session that ends anyway (the
// position limit) is replaced by one with the next seed, whose prefill steps are not timed.
// Then one session is replaced by a new one while the others stream, and the new one's time to
// its first frame is taken (time to first audio at that load, in steady state). With
// `time_kernels` (CUDA), one more step after the timed ones runs with every kernel timed alone:
// where a step of this many lanes spends its time (backbone, heads, tower, sampling), kernel by
// kernel.
PassResult decode_pass(Drama3Model& model, int64_t lanes, int64_t frames, const SessionSpec& base,
                       bool time_kernels = false) {
  uint64_t seed = 1;
  std::set<uint64_t> live, waiting_first;
  auto join = [&] {
    SessionSpec spec = base;
    spec.options.seed = seed++;
    spec.options.max_frames = 1 << 30;
    spec.options.ignore_eos = true;
    return *live.insert(model.join(std::move(spec))).first;
  };
  auto step = [&](const std::function<void(const StepEvent&)>& seen) {
    for (const StepEvent& e : model.step()) {
      seen(e);
      if (e.finished) {
        if (!e.error.empty()) throw Error(e.error);
        if (live.erase(e.session)) join();
      }
    }
  };
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < lanes; ++i) waiting_first.insert(join());
  PassResult r;
  model.reset_timing();
  const uint64_t experts0 = model.backend().transfers().expert_weight_bytes;
  const int64_t target = frames * lanes;
  for (int64_t guard = 0; model.timing().frames < target; ++guard) {
    if (guard > 100 * target + 1000) throw Error("bench decode: the sessions make no frames");
    step([&](const StepEvent& e) {
      if (waiting_first.erase(e.session))
        r.first_frame_s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    });
  }
  r.timing = model.timing();
  r.expert_bytes = model.backend().transfers().expert_weight_bytes - experts0;
#ifdef DRAMA_WITH_CUDA
  if (time_kernels) {
    // An NVTX range (Nsight Compute: --nvtx --nvtx-include "kernel_times lanes_N/" profiles this
    // step's kernels launched one by one).
    const std::string range = "kernel_times lanes_" + std::to_string(lanes);
    r.kernels = kernel_table(cuda::time_each_kernel(model.backend(),
                                                    [&] {
                                                      cuda::push_range(range.c_str());
                                                      step([](const StepEvent&) {});
                                                      cuda::pop_range();
                                                    }),
                             0);
  }
#else
  (void)time_kernels;
#endif
  // One lane's session leaves (cancelled: step() ends it and `step` joins its replacement at
  // once, as a server's queue would), the others keep streaming.
  const uint64_t leaving = *live.begin();
  model.cancel(leaving);
  uint64_t newcomer = 0;
  Clock::time_point joined{};
  bool first = false;
  step([&](const StepEvent& e) {
    if (e.session == leaving && e.finished) joined = Clock::now();
  });
  newcomer = *live.rbegin();
  for (int64_t guard = 0; !first; ++guard) {
    if (guard > 100000) throw Error("bench decode: a joining session makes no frame");
    step([&](const StepEvent& e) {
      if (e.session == newcomer && !e.finished) first = true;
    });
  }
  r.join_at_load_s = std::chrono::duration<double>(Clock::now() - joined).count();
  for (uint64_t id : live) model.cancel(id);
  live.clear();
  model.step();  // ends them: the next pass starts with every lane free
  return r;
}

int run_decode(const DecodeOptions& o) {
  const int64_t max_lanes = *std::max_element(o.lanes.begin(), o.lanes.end());
  ModelCapacity cap;
  cap.lanes = max_lanes;
  cap.max_positions = o.context;
  cap.prefill_chunk = o.prefill_chunk;
  // The model: a checkpoint's, or (--synthetic) random weights built in the backend's memory.
  std::unique_ptr<Checkpoint> ckpt;
  Drama3Config config;
  nlohmann::json provenance;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<SyntheticModel> synthetic;
  std::unique_ptr<Drama3Model> owned;
  double bytes_per_expert = 0;
  if (!o.synthetic.empty()) {
    config = load_drama3_config(o.synthetic);
    backend = make_backend(o.weights.backend);
    synthetic = std::make_unique<SyntheticModel>(*backend, config);
    owned = std::make_unique<Drama3Model>(config, synthetic->weights(), *backend, cap);
    provenance = {
        {"synthetic", std::filesystem::path(o.synthetic).filename().string()},
        {"weights", "random (BF16 N(0, 0.02), NVFP4 experts), built in the backend's memory"},
        {"model_bytes", synthetic->bytes()},
        {"build_s", synthetic->build_s()}};
  } else {
    ResolvedCheckpoint resolved = resolve_weights(o.weights);
    ckpt = std::make_unique<Checkpoint>(resolved.dir, o.weights.residency());
    config = ckpt->config();
    backend = make_backend(o.weights.backend);
    owned = std::make_unique<Drama3Model>(*ckpt, *backend, cap);
    provenance = resolved.provenance;
  }
  Drama3Model& model = *owned;
  const Drama3Config& c = config;
  const MlpWeights* expert = nullptr;
  [[maybe_unused]] const MlpWeights* shared_expert = nullptr;  // read on CUDA only
  for (const auto& l : (synthetic ? synthetic->weights() : ckpt->weights()).backbone)
    if (!l.dense && !l.moe.experts.empty()) {
      expert = &l.moe.experts[0];
      if (l.moe.shared_expert) shared_expert = &*l.moe.shared_expert;
      bytes_per_expert = static_cast<double>(weight_bytes(expert->gate) + weight_bytes(expert->up) +
                                             weight_bytes(expert->down));
    }
  int threads = o.weights.backend.threads;
  if (threads <= 0) threads = available_cores();
  const bool on_cuda = backend->name().rfind("cuda", 0) == 0;
  // Which products run on tensor cores (the limit's arithmetic at the mma rate): on CUDA the BF16
  // products unless DRAMA_CUDA_LINEAR=cores, and the grouped expert products under version 3
  // (NVFP4 experts whose shapes are multiples of 16; BF16 experts run version 1). Nothing on the
  // CPU. (Asked by setting and restoring the switches before any step is captured.)
  TensorCoreProducts tensor_cores;
  std::string tensor_core_products = "none (every product at the multiply-add rate)";
#ifdef DRAMA_WITH_CUDA
  if (on_cuda) {
    const bool linear = cuda::set_tensor_linear(*backend, true);
    cuda::set_tensor_linear(*backend, linear);
    const int version = cuda::set_moe_experts_version(*backend, 3);
    cuda::set_moe_experts_version(*backend, version);
    const int64_t H = c.backbone.hidden_size, I = c.moe.expert_intermediate_size;
    tensor_cores.bf16_linear = linear;
    tensor_cores.routed_experts = version == 3 && expert &&
                                  expert->gate.format == WeightFormat::NVFP4 && H % 16 == 0 &&
                                  I % 16 == 0;
    tensor_cores.shared_expert =
        linear && shared_expert && shared_expert->gate.format == WeightFormat::BF16;
    tensor_core_products =
        std::string(linear ? "the BF16 products (attention projections, router, dense MLPs, "
                             "codebook heads, tower)"
                           : "no BF16 product (DRAMA_CUDA_LINEAR=cores)") +
        (tensor_cores.routed_experts ? "; the routed experts (grouped expert kernels v3)"
                                     : "; not the routed experts (grouped expert kernels v" +
                                           std::to_string(version) + ")") +
        (tensor_cores.shared_expert ? "; the shared expert" : "");
  }
#endif

  // A reference voice of random codes: guidance runs both branches for paired/separate.
  Voice voice;
  voice.frames = 25;
  voice.num_codebooks = c.audio.num_codebooks;
  voice.transcript = "A reference voice for the benchmark.";
  for (int64_t i = 0; i < voice.frames * voice.num_codebooks; ++i)
    voice.codes.push_back(static_cast<int32_t>(mix64(i + 1) % c.audio.codebook_size));
  const std::string text = "The quick brown fox jumps over the lazy dog, twice.";
  const bool single = o.cfg == "single";
  SessionSpec base;
  base.cond = single ? unconditional_prompt(c, text) : conditional_prompt(c, text, voice);
  if (!single) base.uncond = unconditional_prompt(c, text);
  base.options.gamma = single ? 1.0f : 1.5f;
  base.options.cfg = o.cfg == "separate" ? CfgMode::Separate : CfgMode::Paired;
  base.options.sampling = {0.9f, 50, 1.0f};

  // Each lane count is warmed up (the weights paged in, its step captured: CUDA's graph) just
  // before its first sample. With --stop-below-real-time the lane counts are taken in increasing
  // order and those after the first whose streams are slower than real time are not run (more
  // lanes only make every stream slower): a search for the most streams that costs one slow pass.
  std::vector<int64_t> lane_counts = o.lanes, skipped_lanes;
  if (o.stop_below_real_time) {
    std::sort(lane_counts.begin(), lane_counts.end());
    lane_counts.erase(std::unique(lane_counts.begin(), lane_counts.end()), lane_counts.end());
  }
  struct Sample {
    StepTiming t;
    std::vector<double> first_frame_s;
    double join_at_load_s = 0;
    bool experts_counted = false;
    nlohmann::json bw;
    nlohmann::json kernels;  // CUDA: one more step's kernels timed alone (decode_pass)
    double step_s, eff, fraction;
  };
  double decode_peak_rss_mib = 0;
  std::unique_ptr<BandwidthProbe> probe;
  // The ceiling measured after each sample: on the CPU the host's read and copy bandwidth at
  // this thread count; on CUDA the device's copy rate (HBM serves reads and writes from one
  // budget: the rate a step can read its weights), its float32 FMA rate and its tensor cores'
  // mma.sync rate.
  auto measure_ceiling = [&]() -> nlohmann::json {
#ifdef DRAMA_WITH_CUDA
    if (on_cuda) {
      const cuda::DeviceCeilings d = cuda::measure_device_ceilings();
      return {{"read_gb_s", d.copy_bytes_per_s / 1e9},
              {"copy_gb_s", d.copy_bytes_per_s / 1e9},
              {"fma_tflops", d.fma_flops_per_s / 1e12},
              {"mma_bf16_tflops", d.mma_bf16_flops_per_s / 1e12},
              {"note",
               "device-to-device cudaMemcpy of 1 GiB, bytes read + written (read_gb_s: the same "
               "rate), best of 5; float32 FMA chains over every SM, best of 3; independent "
               "mma.sync m16n8k16 bf16 -> f32 tiles in every warp over every SM (4096 flops a "
               "call), best of 3"}};
    }
#endif
    return probe->measure();
  };
  // A stream's real-time factor at a step time: one frame of audio over the step (every lane
  // makes a frame per step); 1 or more is faster than real time.
  const auto real_time_factor = [&](double step_s) { return (1.0 / c.audio.frame_rate) / step_s; };
  std::map<int64_t, std::vector<Sample>> samples;
  const auto bench_t0 = Clock::now();
  // Lane counts in rotation within each repeat, so all see the same machine conditions.
  for (int rep = 0; rep < o.repeats; ++rep) {
    for (size_t li = 0; li < lane_counts.size(); ++li) {
      const int64_t lanes = lane_counts[li];
      if (rep == 0) decode_pass(model, lanes, 2, base);  // the warm-up
      Sample sm;
      PassResult pass = decode_pass(model, lanes, o.frames, base, on_cuda);
      sm.t = pass.timing;
      sm.kernels = std::move(pass.kernels);
      sm.first_frame_s = std::move(pass.first_frame_s);
      std::sort(sm.first_frame_s.begin(), sm.first_frame_s.end());
      if (rep == 0 && li == 0) {
        // Peak resident memory of loading and decoding, read before the bandwidth buffers (1 GiB)
        // exist. It counts the checkpoint pages mapped and touched (file-backed, shared with the
        // page cache) and the process's own allocations.
        rusage usage{};
        getrusage(RUSAGE_SELF, &usage);
        decode_peak_rss_mib = static_cast<double>(usage.ru_maxrss) / 1024.0;
        if (!on_cuda) probe = std::make_unique<BandwidthProbe>(threads);
      }
      sm.bw = measure_ceiling();
      sm.join_at_load_s = pass.join_at_load_s;
      sm.experts_counted = pass.expert_bytes > 0;
      const double steps = static_cast<double>(sm.t.frames) / static_cast<double>(lanes);
      sm.step_s = (sm.t.backbone_s + sm.t.tower_s) / steps;
      sm.eff = static_cast<double>(sm.t.decode_weight_bytes) / steps / sm.step_s / 1e9;
      sm.fraction = sm.eff / sm.bw["read_gb_s"].get<double>();
      const bool slower_than_real_time = real_time_factor(sm.step_s) < 1.0;
      // Progress on stderr (a run cut short by a timeout still shows what it measured).
      std::fprintf(stderr,
                   "bench decode: repeat %d, %lld lanes: %.3f ms a step, %.1f s of passes\n",
                   rep + 1, static_cast<long long>(lanes), sm.step_s * 1e3,
                   std::chrono::duration<double>(Clock::now() - bench_t0).count());
      samples[lanes].push_back(std::move(sm));
      if (rep == 0 && o.stop_below_real_time && slower_than_real_time) {
        skipped_lanes.assign(lane_counts.begin() + static_cast<std::ptrdiff_t>(li) + 1,
                             lane_counts.end());
        lane_counts.resize(li + 1);
        break;
      }
    }
  }
  nlohmann::json runs = nlohmann::json::array();
  // The mean cached positions a decode step's rows attend over: the prompts' mean length plus
  // half of a pass's frames.
  const double mean_positions =
      (static_cast<double>(base.cond.rows) +
       static_cast<double>(base.uncond ? base.uncond->rows : base.cond.rows)) /
          2 +
      static_cast<double>(o.frames) / 2;
  int64_t most_streams = 0;
  StepLimitInputs limit_inputs;
  limit_inputs.experts_counted = true;
  for (int64_t lanes : lane_counts) {
    // The sample with the median step time speaks for the run; every sample is listed.
    std::vector<const Sample*> order;
    for (const auto& sm : samples[lanes]) order.push_back(&sm);
    std::sort(order.begin(), order.end(),
              [](const Sample* a, const Sample* b) { return a->step_s < b->step_s; });
    const Sample& med = *order[order.size() / 2];
    const StepTiming& t = med.t;
    const double steps = static_cast<double>(t.frames) / static_cast<double>(lanes);
    const double step_s = med.step_s;
    nlohmann::json per_sample = nlohmann::json::array();
    for (const auto& sm : samples[lanes])
      per_sample.push_back({{"step_ms", sm.step_s * 1e3},
                            {"read_gb_s", sm.bw["read_gb_s"]},
                            {"fraction_of_read_bandwidth", sm.fraction}});
    runs.push_back(
        {{"lanes", lanes},
         {"batch_rows", lanes * (single ? 1 : 2)},
         {"frames", t.frames},
         {"step_ms", step_s * 1e3},
         {"per_frame_ms", step_s * 1e3 / static_cast<double>(lanes)},
         {"backbone_ms_per_step", t.backbone_s / steps * 1e3},
         {"tower_ms_per_step", t.tower_s / steps * 1e3},
         {"aggregate_frames_per_s", static_cast<double>(lanes) / step_s},
         {"stream_real_time_factor", real_time_factor(step_s)},
         {"weight_bytes_per_step", static_cast<double>(t.decode_weight_bytes) / steps},
         {"first_frame_ms_median",
          med.first_frame_s.empty() ? 0.0 : med.first_frame_s[med.first_frame_s.size() / 2] * 1e3},
         {"first_frame_ms_max", med.first_frame_s.empty() ? 0.0 : med.first_frame_s.back() * 1e3},
         {"first_frame_ms_joining_at_load", med.join_at_load_s * 1e3},
         {"effective_gb_s", med.eff},
         {"memory", med.bw},
         {"fraction_of_read_bandwidth", med.fraction},
         {"samples", per_sample},
         {"kernel_times", med.kernels}});
    // The bound this step is measured against (step_limit), from the same sample's ceiling.
    const int64_t rows = lanes * (single ? 1 : 2);
    const auto rate = [&](const char* key, double unit) {
      return med.bw.contains(key) ? med.bw[key].get<double>() * unit : 0.0;
    };
    StepLimitInputs in;
    in.positions = mean_positions;
    in.weight_bytes = static_cast<double>(t.decode_weight_bytes) / steps;
    in.experts_counted = med.experts_counted;
    in.bytes_per_expert = bytes_per_expert;
    in.rates = {rate("read_gb_s", 1e9), rate("fma_tflops", 1e12), rate("mma_bf16_tflops", 1e12)};
    in.tensor_cores = tensor_cores;
    const StepLimit lim = step_limit(c, rows, in);
    nlohmann::json& limit = runs.back()["limit"];
    limit = {{"weight_bytes", lim.weight_bytes},
             {"expert_bytes_added", lim.expert_bytes},
             {"kv_cache_bytes", lim.kv_bytes},
             {"flops", lim.flops},
             {"fma_flops", lim.fma_flops},
             {"mma_flops_issued", lim.mma_flops},
             {"bytes_ms", lim.bytes_ms},
             {"step_ms", lim.ms()},
             {"fraction_of_limit", lim.ms() / (step_s * 1e3)}};
    if (in.rates.fma_flops_per_s > 0) limit["fma_ms"] = lim.fma_ms;
    if (in.rates.mma_flops_per_s > 0 && lim.mma_flops > 0) limit["mma_ms"] = lim.mma_ms;
    if (in.rates.fma_flops_per_s > 0 || in.rates.mma_flops_per_s > 0)
      limit["flops_ms"] = lim.flops_ms();
    if (real_time_factor(step_s) >= 1.0 && lanes > most_streams) most_streams = lanes;
    limit_inputs = in;
  }
  // The most streams the limit allows faster than real time (a step within one frame of audio),
  // from the last lane count's measured weight bytes; only where the experts are added by the
  // expected count (with counted experts the measured bytes already depend on the rows).
  nlohmann::json streams_limit = "not computed: the backend counts its experts";
  if (!limit_inputs.experts_counted) streams_limit = limit_streams(c, single ? 1 : 2, limit_inputs);
  nlohmann::json j = {
      {"bench", "decode"},
      {"provenance", provenance},
      {"backend", backend->name()},
      {"threads", threads},
      {"context_positions", model.max_positions()},
      {"prefill_chunk", model.capacity().prefill_chunk},
      {"most_streams_faster_than_real_time", most_streams},
      {"lanes_skipped_below_real_time", skipped_lanes},
      {"limit_streams_faster_than_real_time", streams_limit},
      {"limit_tensor_core_products", tensor_core_products},
      {"weights", o.weights.mmap ? "mapped (--mmap)" : "in memory"},
      {"cfg", o.cfg},
      {"repeats", o.repeats},
      {"frame_rate", c.audio.frame_rate},
      {"decode_peak_rss_mib", decode_peak_rss_mib},
      {"note",
       "each sample: `frames` frames per lane of concurrent sessions in steps without prefill "
       "(the sessions ignore end of speech, so every lane streams throughout), "
       "then the bandwidth measured at once; lane counts run in rotation; the figures of each "
       "lane count are its sample with the median step time. A stream's real-time factor is the "
       "audio of one frame over the step time (every lane makes a frame per step). Weight bytes "
       "= every linear call's weight once per step (paired: one read for both rows; separate: "
       "one per branch); experts counted once per step when any row chose them; prefill "
       "excluded. first_frame_ms: from the joining of all `lanes` sessions at once to each one's "
       "first frame (prefill in chunks of the model's prefill_chunk rows per step); "
       "first_frame_ms_joining_at_load: after the timed steps one session leaves and a new one "
       "joins at once while the other lanes stream, from its joining to its first frame. "
       "backbone_ms_per_step / tower_ms_per_step: the wall-clock split at the host's boundary "
       "between them; a step replayed as a CUDA graph has none, and all of it counts as tower. "
       "kernel_times (CUDA): one more step after the timed ones of the median sample, launched "
       "(not a graph) with each kernel timed alone, by kernel name: where the step's time goes "
       "(backbone, heads, tower, sampling); each figure includes the empty kernel's time. "
       "limit: the step's bound (model/step_limit.h), max(bytes / copy rate, mma_flops_issued / "
       "mma rate + fma_flops / FMA rate), each term 0 where its rate is not measured. bytes = "
       "the counted weight bytes, plus the distinct experts the rows choose under uniform "
       "routing where the backend does not count them (expert_bytes_added), plus every row "
       "reading the mean cached positions of each layer's KV cache (float32). flops = 2 x rows "
       "x the parameters a row uses (experts per token, attention over the positions, the "
       "tower's K positions). The products limit_tensor_core_products names run on tensor "
       "cores (CUDA: mma.sync m16n8k16 bf16 -> f32): mma_flops_issued counts the mma the kernels "
       "issue, 4096 flops each, three a (16 weights x 16 inputs x 8 rows) tile since each "
       "float32 activation is split into three bfloat16 terms, rows padded to tiles of 8 (the "
       "experts' tiles per expert expected under uniform routing), at mma_bf16_tflops; "
       "fma_flops, the rest (attention's scores and value sums; every product on the CPU), at "
       "the float32 FMA rate; the two add (different kernels, one after another). "
       "most_streams_faster_than_real_time: the most lanes measured whose streams each make a "
       "frame within one frame of audio; limit_streams_faster_than_real_time: the most the limit "
       "allows; lanes_skipped_below_real_time: with --stop-below-real-time, the lane counts "
       "not run because a smaller one was already slower than real time"}};
  if (o.lanes.size() == 1) {
    for (auto& [k, v] : runs[0].items()) j[k] = v;  // one lane count: its figures at the top
  } else {
    j["runs"] = runs;
  }
  const std::string out = j.dump(2);
  std::printf("%s\n", out.c_str());
  if (!o.json.empty()) {
    std::ofstream f(o.json);
    f << out << "\n";
    if (!f) throw Error("cannot write " + o.json);
  }
  return 0;
}

}  // namespace

void register_bench_decode(CLI::App& bench, std::function<int()>& run) {
  auto o = std::make_shared<DecodeOptions>();
  auto* sub = bench.add_subcommand("decode", "Per-frame decode time and weight bandwidth");
  sub->add_option("--frames", o->frames, "Frames to time per sample")->check(CLI::PositiveNumber);
  sub->add_option("--repeats", o->repeats, "Samples (decode pass + bandwidth); median reported")
      ->check(CLI::Range(1, 100));
  auto* lanes = sub->add_option("--lanes", o->lanes,
                                "Concurrent sessions (a list, e.g. --lanes 1,2,4,8: run in "
                                "rotation); with --synthetic, sessions of the whole model")
                    ->delimiter(',')
                    ->check(CLI::Range(1, 4096));
  sub->add_flag("--stop-below-real-time", o->stop_below_real_time,
                "With several --lanes: take them in increasing order and skip those after the "
                "first whose streams are slower than real time");
  sub->add_option("--context", o->context,
                  "Positions per guidance branch's cache (0: the config's "
                  "max_position_embeddings); many lanes of a long-context model need fewer")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--prefill-chunk", o->prefill_chunk,
                  "Prompt rows prefilled per step over all joining sessions (the model's default: "
                  "128)")
      ->check(CLI::Range(1, 65536));
  sub->add_option("--cfg", o->cfg, "paired (batch of 2), separate, or single (no guidance)")
      ->check(CLI::IsMember({"paired", "separate", "single"}));
  sub->add_option("--json", o->json, "Also write the JSON object to this file");
  sub->add_option("--synthetic", o->synthetic,
                  "Random weights of this config's geometry, built in the backend's memory (no "
                  "checkpoint files): the backbone step alone, or with --lanes the whole model's "
                  "sessions")
      ->check(CLI::ExistingFile);
  sub->add_option("--step-rows", o->step_rows,
                  "With --synthetic (no --lanes): backbone step row counts to time beside batch 1 "
                  "and paired batch 2 (a list, each 1..512: a busy server's steps), as graphs and "
                  "kernel by kernel")
      ->delimiter(',')
      ->check(CLI::Range(1, 512));
  add_weights_options(*sub, o->weights);
  sub->callback([&run, o, lanes] {
    o->lanes_given = lanes->count() > 0;
    run = [o] {
      if (!o->step_rows.empty() && (o->synthetic.empty() || o->lanes_given))
        throw Error("--step-rows times the backbone step: it needs --synthetic and no --lanes");
      if (!o->synthetic.empty() && !o->lanes_given)
        return run_synthetic_decode(o->synthetic, o->weights.backend, o->frames, o->repeats,
                                    o->step_rows, o->json);
      return run_decode(*o);
    };
  });
}

}  // namespace drama::cli
