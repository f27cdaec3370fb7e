// `drama bench decode`: per-frame decode time of a checkpoint (backbone and tower split) and the
// effective bandwidth of the weight bytes the frame actually reads (attention, dense MLPs, the
// routed experts, heads), against the memory read bandwidth measured in the same run with the
// same thread count (a parallel read of a buffer far larger than the caches, and a copy).
// On a shared VM both figures swing by 20% from one second to the next, so the run takes
// `--repeats` samples, each a decode pass followed at once by a bandwidth measurement, and
// reports the median of the per-sample fractions (and each sample).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include <sys/resource.h>

#include "cli/bench.h"
#include "cli/commands.h"
#include "cli/weights_options.h"
#include "format/checkpoint.h"
#include "model/drama3_model.h"
#include "model/prompt.h"
#include "util/error.h"
#include "util/sampling.h"

namespace drama::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct DecodeOptions {
  int64_t frames = 32;
  int repeats = 5;
  std::string cfg = "paired";
  std::string json;
  std::string synthetic;  // a config file: random weights in the backend's memory
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

int run_decode(const DecodeOptions& o) {
  ResolvedCheckpoint resolved = resolve_weights(o.weights);
  Checkpoint ckpt(resolved.dir, o.weights.residency());
  const Drama3Config& c = ckpt.config();
  auto backend = make_backend(o.weights.backend);
  Drama3Model model(ckpt, *backend);
  int threads = o.weights.backend.threads;
  if (threads <= 0) threads = available_cores();

  // A reference voice of random codes: guidance runs both branches for paired/separate.
  Voice voice;
  voice.frames = 25;
  voice.num_codebooks = c.audio.num_codebooks;
  voice.transcript = "A reference voice for the benchmark.";
  for (int64_t i = 0; i < voice.frames * voice.num_codebooks; ++i)
    voice.codes.push_back(static_cast<int32_t>(mix64(i + 1) % c.audio.codebook_size));
  const std::string text = "The quick brown fox jumps over the lazy dog, twice.";
  const bool single = o.cfg == "single";
  const Prompt cond = single ? unconditional_prompt(c, text) : conditional_prompt(c, text, voice);
  const Prompt uncond = unconditional_prompt(c, text);
  GenerationOptions g;
  g.gamma = single ? 1.0f : 1.5f;
  g.cfg = o.cfg == "separate" ? CfgMode::Separate : CfgMode::Paired;
  g.sampling = {0.9f, 50, 1.0f};

  // Warm-up (page in the weights); each pass then runs frames until the count is reached (eos
  // restarts), with the same seeds, so every pass does the same work.
  g.max_frames = 2;
  model.generate(cond, single ? nullptr : &uncond, g, {});
  auto decode_pass = [&] {
    model.reset_timing();
    for (uint64_t seed = 1; model.timing().frames < o.frames && seed < 1000; ++seed) {
      g.seed = seed;
      g.max_frames = o.frames - model.timing().frames;
      model.generate(cond, single ? nullptr : &uncond, g, {});
    }
    if (model.timing().frames == 0) throw Error("bench decode: no frame was generated");
    return model.timing();
  };
  struct Sample {
    StepTiming t;
    nlohmann::json bw;
    double frame_s, eff, fraction;
  };
  std::vector<Sample> samples;
  double decode_peak_rss_mib = 0;
  std::unique_ptr<BandwidthProbe> probe;
  for (int rep = 0; rep < o.repeats; ++rep) {
    Sample sm;
    sm.t = decode_pass();
    if (rep == 0) {
      // Peak resident memory of loading and decoding, read before the bandwidth buffers (1 GiB)
      // exist. It counts the checkpoint pages mapped and touched (file-backed, shared with the
      // page cache) and the process's own allocations.
      rusage usage{};
      getrusage(RUSAGE_SELF, &usage);
      decode_peak_rss_mib = static_cast<double>(usage.ru_maxrss) / 1024.0;
      probe = std::make_unique<BandwidthProbe>(threads);
    }
    sm.bw = probe->measure();
    sm.frame_s = (sm.t.backbone_s + sm.t.tower_s) / sm.t.frames;
    sm.eff = static_cast<double>(sm.t.decode_weight_bytes) / sm.t.frames / sm.frame_s / 1e9;
    sm.fraction = sm.eff / sm.bw["read_gb_s"].get<double>();
    samples.push_back(std::move(sm));
  }
  // The sample with the median fraction speaks for the run; every sample is listed.
  std::vector<const Sample*> order;
  for (const auto& sm : samples) order.push_back(&sm);
  std::sort(order.begin(), order.end(),
            [](const Sample* a, const Sample* b) { return a->fraction < b->fraction; });
  const Sample& med = *order[order.size() / 2];
  const StepTiming& t = med.t;
  const double frame_s = med.frame_s;
  const double bytes = static_cast<double>(t.decode_weight_bytes) / t.frames;
  nlohmann::json per_sample = nlohmann::json::array();
  for (const auto& sm : samples)
    per_sample.push_back({{"per_frame_ms", sm.frame_s * 1e3},
                          {"read_gb_s", sm.bw["read_gb_s"]},
                          {"fraction_of_read_bandwidth", sm.fraction}});
  nlohmann::json j = {
      {"bench", "decode"},
      {"provenance", resolved.provenance},
      {"backend", backend->name()},
      {"threads", threads},
      {"weights", o.weights.mmap ? "mapped (--mmap)" : "in memory"},
      {"cfg", o.cfg},
      {"batch_rows", single ? 1 : 2},
      {"frames", t.frames},
      {"repeats", o.repeats},
      {"per_frame_ms", frame_s * 1e3},
      {"backbone_ms_per_frame", t.backbone_s / t.frames * 1e3},
      {"tower_ms_per_frame", t.tower_s / t.frames * 1e3},
      {"frames_per_s", 1.0 / frame_s},
      {"real_time_factor", (1.0 / c.audio.frame_rate) / frame_s},
      {"weight_bytes_per_frame", bytes},
      {"effective_gb_s", med.eff},
      {"memory", med.bw},
      {"fraction_of_read_bandwidth", med.fraction},
      {"samples", per_sample},
      {"decode_peak_rss_mib", decode_peak_rss_mib},
      {"note",
       "each sample: a decode pass of `frames` frames, then the bandwidth measured at once; the "
       "figures above are the sample with the median fraction. Weight bytes = every linear "
       "call's weight once (paired: one read for both rows; separate: one per branch); experts "
       "counted only when routed; prefill excluded"}};
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
  sub->add_option("--cfg", o->cfg, "paired (batch of 2), separate, or single (no guidance)")
      ->check(CLI::IsMember({"paired", "separate", "single"}));
  sub->add_option("--json", o->json, "Also write the JSON object to this file");
  sub->add_option("--synthetic", o->synthetic,
                  "Time the backbone step on random weights of this config's geometry, built in "
                  "the backend's memory (no checkpoint files)")
      ->check(CLI::ExistingFile);
  add_weights_options(*sub, o->weights);
  sub->callback([&run, o] {
    run = [o] {
      if (!o->synthetic.empty())
        return run_synthetic_decode(o->synthetic, o->weights.backend, o->frames, o->repeats,
                                    o->json);
      return run_decode(*o);
    };
  });
}

}  // namespace drama::cli
