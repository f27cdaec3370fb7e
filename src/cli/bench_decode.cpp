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
#include "util/error.h"
#include "util/sampling.h"

namespace drama::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct DecodeOptions {
  std::vector<int64_t> lanes = {1};
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

// `lanes` concurrent sessions of the same prompt (seeds 1, 2, ...) stepped together until they
// have made `frames` frames each in steps without prefill; a session that ends (EOS) is replaced
// by one with the next seed, whose prefill steps are not timed.
struct PassResult {
  StepTiming timing;
  std::vector<double> first_frame_s;  // per initial session: from its join to its first frame
};

// `lanes` concurrent sessions of the same prompt (seeds 1, 2, ...) joined at once and stepped
// together until they have made `frames` frames each in steps without prefill; a session that
// ends (EOS) is replaced by one with the next seed, whose prefill steps are not timed.
PassResult decode_pass(Drama3Model& model, int64_t lanes, int64_t frames, const SessionSpec& base) {
  uint64_t seed = 1;
  std::set<uint64_t> live, waiting_first;
  auto join = [&] {
    SessionSpec spec = base;
    spec.options.seed = seed++;
    spec.options.max_frames = 1 << 30;
    return *live.insert(model.join(std::move(spec))).first;
  };
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < lanes; ++i) waiting_first.insert(join());
  PassResult r;
  model.reset_timing();
  const int64_t target = frames * lanes;
  for (int64_t guard = 0; model.timing().frames < target; ++guard) {
    if (guard > 100 * target + 1000) throw Error("bench decode: the sessions make no frames");
    for (const StepEvent& e : model.step()) {
      if (waiting_first.erase(e.session))
        r.first_frame_s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      if (e.finished) {
        if (!e.error.empty()) throw Error(e.error);
        live.erase(e.session);
        join();
      }
    }
  }
  r.timing = model.timing();
  for (uint64_t id : live) model.cancel(id);
  model.step();  // ends them: the next pass starts with every lane free
  return r;
}

int run_decode(const DecodeOptions& o) {
  ResolvedCheckpoint resolved = resolve_weights(o.weights);
  Checkpoint ckpt(resolved.dir, o.weights.residency());
  const Drama3Config& c = ckpt.config();
  auto backend = make_backend(o.weights.backend);
  const int64_t max_lanes = *std::max_element(o.lanes.begin(), o.lanes.end());
  ModelCapacity cap;
  cap.lanes = max_lanes;
  Drama3Model model(ckpt, *backend, cap);
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
  SessionSpec base;
  base.cond = single ? unconditional_prompt(c, text) : conditional_prompt(c, text, voice);
  if (!single) base.uncond = unconditional_prompt(c, text);
  base.options.gamma = single ? 1.0f : 1.5f;
  base.options.cfg = o.cfg == "separate" ? CfgMode::Separate : CfgMode::Paired;
  base.options.sampling = {0.9f, 50, 1.0f};

  // Warm-up (page in the weights).
  decode_pass(model, max_lanes, 2, base);
  struct Sample {
    StepTiming t;
    std::vector<double> first_frame_s;
    nlohmann::json bw;
    double step_s, eff, fraction;
  };
  double decode_peak_rss_mib = 0;
  std::unique_ptr<BandwidthProbe> probe;
  std::map<int64_t, std::vector<Sample>> samples;
  // Lane counts in rotation within each repeat, so all see the same machine conditions.
  for (int rep = 0; rep < o.repeats; ++rep) {
    for (int64_t lanes : o.lanes) {
      Sample sm;
      PassResult pass = decode_pass(model, lanes, o.frames, base);
      sm.t = pass.timing;
      sm.first_frame_s = std::move(pass.first_frame_s);
      std::sort(sm.first_frame_s.begin(), sm.first_frame_s.end());
      if (!probe) {
        // Peak resident memory of loading and decoding, read before the bandwidth buffers (1 GiB)
        // exist. It counts the checkpoint pages mapped and touched (file-backed, shared with the
        // page cache) and the process's own allocations.
        rusage usage{};
        getrusage(RUSAGE_SELF, &usage);
        decode_peak_rss_mib = static_cast<double>(usage.ru_maxrss) / 1024.0;
        probe = std::make_unique<BandwidthProbe>(threads);
      }
      sm.bw = probe->measure();
      const double steps = static_cast<double>(sm.t.frames) / static_cast<double>(lanes);
      sm.step_s = (sm.t.backbone_s + sm.t.tower_s) / steps;
      sm.eff = static_cast<double>(sm.t.decode_weight_bytes) / steps / sm.step_s / 1e9;
      sm.fraction = sm.eff / sm.bw["read_gb_s"].get<double>();
      samples[lanes].push_back(std::move(sm));
    }
  }
  nlohmann::json runs = nlohmann::json::array();
  for (int64_t lanes : o.lanes) {
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
         {"stream_real_time_factor", (1.0 / c.audio.frame_rate) / step_s},
         {"weight_bytes_per_step", static_cast<double>(t.decode_weight_bytes) / steps},
         {"first_frame_ms_median",
          med.first_frame_s.empty() ? 0.0 : med.first_frame_s[med.first_frame_s.size() / 2] * 1e3},
         {"first_frame_ms_max", med.first_frame_s.empty() ? 0.0 : med.first_frame_s.back() * 1e3},
         {"effective_gb_s", med.eff},
         {"memory", med.bw},
         {"fraction_of_read_bandwidth", med.fraction},
         {"samples", per_sample}});
  }
  nlohmann::json j = {
      {"bench", "decode"},
      {"provenance", resolved.provenance},
      {"backend", backend->name()},
      {"threads", threads},
      {"weights", o.weights.mmap ? "mapped (--mmap)" : "in memory"},
      {"cfg", o.cfg},
      {"repeats", o.repeats},
      {"frame_rate", c.audio.frame_rate},
      {"decode_peak_rss_mib", decode_peak_rss_mib},
      {"note",
       "each sample: `frames` frames per lane of concurrent sessions in steps without prefill, "
       "then the bandwidth measured at once; lane counts run in rotation; the figures of each "
       "lane count are its sample with the median step time. A stream's real-time factor is the "
       "audio of one frame over the step time (every lane makes a frame per step). Weight bytes "
       "= every linear call's weight once per step (paired: one read for both rows; separate: "
       "one per branch); experts counted once per step when any row chose them; prefill "
       "excluded. first_frame_ms: from the joining of all `lanes` sessions at once to each one's "
       "first frame (prefill in chunks of the model's prefill_chunk rows per step)"}};
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
  sub->add_option("--lanes", o->lanes,
                  "Concurrent sessions (a list, e.g. --lanes 1,2,4,8: run in rotation)")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096));
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
