// `drama bench decode --synthetic CONFIG`: the backbone's decode step (batch 1, and a paired
// batch of 2 as guidance runs it) on a random model of the config's geometry built in the
// backend's memory, with no checkpoint files: BF16 tensors N(0, 0.02), NVFP4 codes uniform, block
// scales in [0.5, 2], norms 1. Each tensor is uploaded from a small host pattern at its own
// offset, so a 17 GB model costs no 17 GB of host memory. Beside the step: the NVFP4 expert
// products of one layer alone (Backend::moe_experts, as the step runs them), and the device's
// copy bandwidth measured in the same run (CUDA: device-to-device; CPU: host memcpy).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cli/bench.h"
#include "format/config.h"
#include "model/backbone.h"
#include "model/kv_pool.h"
#include "model/step_limit.h"
#include "model/transformer.h"
#include "model/workspace.h"
#include "util/dtype.h"
#include "util/error.h"

#ifdef DRAMA_WITH_CUDA
#include "backend/cuda/ceilings.h"
#include "backend/cuda/grouped_experts.h"
#endif

namespace drama::cli {

namespace {

using Clock = std::chrono::steady_clock;

// Random tensors in backend memory, uploaded from host patterns.
class SyntheticWeights {
 public:
  explicit SyntheticWeights(Backend& b) : b_(b), gen_(20261201) {
    std::normal_distribution<float> normal(0.0f, 0.02f);
    bf16_.resize(kPattern / 2);
    for (auto& v : bf16_) v = f32_to_bf16(normal(gen_));
    codes_.resize(kPattern);
    for (auto& v : codes_) v = static_cast<uint8_t>(gen_());
    scales_.resize(kPattern);
    for (auto& v : scales_)
      v = f32_to_e4m3(std::exp2(std::uniform_real_distribution<float>(-1.0f, 1.0f)(gen_)));
  }

  const uint16_t* bf16(int64_t n) {
    return static_cast<const uint16_t*>(fill(bf16_.data(), 2, static_cast<size_t>(n)));
  }
  const uint16_t* ones(int64_t n) {
    std::vector<uint16_t> one(static_cast<size_t>(n), f32_to_bf16(1.0f));
    auto buf = b_.alloc(one.size() * 2);
    b_.upload(buf->data(), one.data(), one.size() * 2);
    bufs_.push_back(std::move(buf));
    bytes_ += one.size() * 2;
    return static_cast<const uint16_t*>(bufs_.back()->data());
  }
  LinearWeight linear(int64_t out, int64_t in, WeightFormat format) {
    LinearWeight w;
    w.format = format;
    w.out = out;
    w.in = in;
    if (format == WeightFormat::BF16) {
      w.data = bf16(out * in);
    } else {
      w.data = fill(codes_.data(), 1, static_cast<size_t>(out * in / 2));
      w.scales =
          static_cast<const uint8_t*>(fill(scales_.data(), 1, static_cast<size_t>(out * in / 16)));
      w.scale2 = 1.0f / 64;
    }
    return w;
  }
  double bytes() const { return static_cast<double>(bytes_); }

 private:
  static constexpr size_t kPattern = size_t{16} << 20;  // bytes per pattern

  const void* fill(const void* pattern, size_t elem, size_t count) {
    const size_t bytes = count * elem;
    auto buf = b_.alloc(bytes);
    auto* dst = static_cast<uint8_t*>(buf->data());
    const auto* src = static_cast<const uint8_t*>(pattern);
    // A random element-aligned start in the pattern for each tensor, then whole passes.
    size_t at = (gen_() % (kPattern / elem)) * elem % kPattern;
    for (size_t done = 0; done < bytes;) {
      const size_t n = std::min(bytes - done, kPattern - at);
      b_.upload(dst + done, src + at, n);
      done += n;
      at = 0;
    }
    bytes_ += bytes;
    bufs_.push_back(std::move(buf));
    return bufs_.back()->data();
  }

  Backend& b_;
  std::mt19937_64 gen_;
  std::vector<uint16_t> bf16_;
  std::vector<uint8_t> codes_, scales_;
  std::vector<std::unique_ptr<DeviceBuffer>> bufs_;
  size_t bytes_ = 0;
};

// One layer of a transformer stack of geometry `t`: dense (BF16 MLP) or MoE (BF16 router, NVFP4
// experts of original ids 0..E-1).
LayerWeights synthetic_layer(SyntheticWeights& s, const TransformerConfig& t, bool dense,
                             const MoeConfig& moe) {
  const int64_t H = t.hidden_size, q = t.num_heads * t.head_dim, kv = t.num_kv_heads * t.head_dim;
  LayerWeights lw;
  lw.input_norm = s.ones(H);
  lw.post_attn_norm = s.ones(H);
  lw.attn.q = s.linear(q, H, WeightFormat::BF16);
  lw.attn.k = s.linear(kv, H, WeightFormat::BF16);
  lw.attn.v = s.linear(kv, H, WeightFormat::BF16);
  lw.attn.o = s.linear(H, q, WeightFormat::BF16);
  lw.attn.q_norm = s.ones(t.head_dim);
  lw.attn.k_norm = s.ones(t.head_dim);
  lw.dense = dense;
  if (dense) {
    lw.mlp = {s.linear(t.intermediate_size, H, WeightFormat::BF16),
              s.linear(t.intermediate_size, H, WeightFormat::BF16),
              s.linear(H, t.intermediate_size, WeightFormat::BF16)};
  } else {
    const int64_t E = moe.num_experts, I = moe.expert_intermediate_size;
    lw.moe.router = s.linear(E, H, WeightFormat::BF16);
    for (int64_t e = 0; e < E; ++e) {
      lw.moe.original_id.push_back(static_cast<int32_t>(e));
      lw.moe.logit_column.push_back(static_cast<int32_t>(e));
      lw.moe.experts.push_back({s.linear(I, H, WeightFormat::NVFP4),
                                s.linear(I, H, WeightFormat::NVFP4),
                                s.linear(H, I, WeightFormat::NVFP4)});
    }
  }
  return lw;
}

// The backbone's weights; with `tower`, the tower's too (the whole model but the codec).
ModelWeights synthetic_model(SyntheticWeights& s, const Drama3Config& c, bool tower) {
  const auto& bb = c.backbone;
  const int64_t H = bb.hidden_size;
  ModelWeights w;
  w.text_embed = s.bf16(c.text.vocab_size * H);
  w.audio_embed = s.bf16(c.audio.num_codebooks * (c.audio.codebook_size + 1) * H);
  for (int64_t l = 0; l < bb.num_layers; ++l)
    w.backbone.push_back(synthetic_layer(s, bb, c.is_dense_layer(l), c.moe));
  w.backbone_norm = s.ones(H);
  w.codebook0_head = s.linear(c.audio.codebook_size + 1, H, WeightFormat::BF16);
  if (tower) {
    const auto& t = c.tower;
    const int64_t Ht = t.hidden_size, cs = c.audio.codebook_size;
    w.tower_input_proj = s.linear(Ht, H, WeightFormat::BF16);
    for (int64_t l = 0; l < t.num_layers; ++l)
      w.tower.push_back(synthetic_layer(s, t, true, c.moe));
    w.tower_norm = s.ones(Ht);
    for (int64_t k = 1; k < c.audio.num_codebooks; ++k)
      w.tower_heads.push_back(s.linear(cs, Ht, WeightFormat::BF16));
  }
  return w;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Ceiling {
  double copy_bytes_per_s = 0;
  std::string what, device;
  double fma_flops_per_s = 0, mma_flops_per_s = 0;  // CUDA: measured in the same call
};

Ceiling measure_copy(const std::string& backend) {
#ifdef DRAMA_WITH_CUDA
  if (backend.rfind("cuda", 0) == 0) {
    const cuda::DeviceCeilings d = cuda::measure_device_ceilings();
    return {d.copy_bytes_per_s,
            "device-to-device cudaMemcpy of 1 GiB, bytes read + written, best of 5; beside it "
            "float32 FMA chains and independent mma.sync m16n8k16 bf16 -> f32 tiles over every SM, "
            "best of 3 each",
            cuda::device_description(), d.fma_flops_per_s, d.mma_bf16_flops_per_s};
  }
#endif
  (void)backend;
  const size_t n = size_t{512} << 20;
  std::vector<uint8_t> a(n, 1), b(n, 2);
  double best = 1e30;
  for (int i = 0; i < 4; ++i) {
    const auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), n);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
    a[i] = b[n - 1 - i];
  }
  return {2.0 * n / best, "host memcpy of 512 MiB on one thread, bytes read + written, best of 4",
          "host"};
}

}  // namespace

#ifdef DRAMA_WITH_CUDA
nlohmann::json kernel_table(const cuda::KernelTimes& times, size_t sequence_kept) {
  std::vector<std::string> order;
  std::map<std::string, std::pair<int64_t, double>> by_name;
  nlohmann::json sequence = nlohmann::json::array();
  double sum_us = 0;
  for (const auto& k : times.kernels) {
    auto [it, fresh] = by_name.try_emplace(k.kernel, 0, 0.0);
    if (fresh) order.push_back(k.kernel);
    it->second.first += 1;
    it->second.second += k.us;
    sum_us += k.us;
    if (sequence.size() < sequence_kept)
      sequence.push_back({k.kernel, std::round(k.us * 100) / 100});
  }
  nlohmann::json kernels = nlohmann::json::array();
  for (const auto& name : order)
    kernels.push_back({{"kernel", name},
                       {"launches", by_name[name].first},
                       {"us", by_name[name].second},
                       {"share", sum_us > 0 ? by_name[name].second / sum_us : 0.0}});
  return {{"launches", times.kernels.size()},
          {"sum_of_kernels_ms", sum_us * 1e-3},
          {"late_launches", times.late},
          {"empty_kernel_us", times.empty_kernel_us},
          {"by_kernel", kernels},
          {"first_launches_us", sequence}};
}
#endif

struct SyntheticModel::Store {
  explicit Store(Backend& b) : weights(b) {}
  SyntheticWeights weights;
};

SyntheticModel::SyntheticModel(Backend& backend, const Drama3Config& config)
    : store_(std::make_unique<Store>(backend)) {
  const auto t0 = Clock::now();
  weights_ = synthetic_model(store_->weights, config, true);
  backend.synchronize();
  build_s_ = std::chrono::duration<double>(Clock::now() - t0).count();
}

SyntheticModel::~SyntheticModel() = default;

double SyntheticModel::bytes() const {
  return store_->weights.bytes();
}

int run_synthetic_decode(const std::string& config_path, const BackendOptions& backend_options,
                         int64_t steps, int repeats, const std::vector<int64_t>& step_rows,
                         const std::string& json_path) {
  const Drama3Config c = load_drama3_config(config_path);
  auto backend = make_backend(backend_options);
  Backend& b = *backend;
  const auto t_build = Clock::now();
  SyntheticWeights synth(b);
  const ModelWeights w = synthetic_model(synth, c, false);
  b.synchronize();
  const double build_s = std::chrono::duration<double>(Clock::now() - t_build).count();
  Backbone backbone(b, c, w);
  Workspace ws(b);
  const auto& bb = c.backbone;
  const int64_t H = bb.hidden_size, kv = bb.num_kv_heads * bb.head_dim;
  const int64_t prompt = 64, capacity = prompt + 8;
  // The step's row counts: 1 and paired 2, then --step-rows (each row its own cache slot).
  std::vector<int64_t> all_rows = {1, 2};
  constexpr int64_t kMostStepRows = 512;  // a busy server's steps (256 paired streams)
  for (const int64_t r : step_rows) {
    if (r < 1 || r > kMostStepRows)
      throw Error("--step-rows: each from 1 to " + std::to_string(kMostStepRows));
    if (std::find(all_rows.begin(), all_rows.end(), r) == all_rows.end()) all_rows.push_back(r);
  }
  const int64_t max_rows = *std::max_element(all_rows.begin(), all_rows.end());
  // The caches hold `capacity` positions (memory for 512 rows), and attention launches as a
  // server with the config's default context would (its window, kv_pool.h: CUDA's splits).
  KvPool cache(b, bb.num_layers, max_rows, capacity, kv, bb.max_position_embeddings);
  // Workspace for the most rows a call has (a captured step may not allocate).
  backbone.stack().reserve(ws, std::max(prompt, max_rows));
  // x holds a prefill's prompt rows, then a step's rows.
  auto x = b.alloc(static_cast<size_t>(std::max(prompt, max_rows) * H) * 4),
       h = b.alloc(static_cast<size_t>(max_rows * H) * 4),
       logits = b.alloc(static_cast<size_t>(max_rows * (c.audio.codebook_size + 1)) * 4);
  // Prefill every cache slot with `prompt` audio frames of fixed codes: slots 0 and 1 (the
  // paired branches) the same codes, each further slot its own (rows that route differently).
  std::vector<int32_t> codes(
      static_cast<size_t>(std::max(prompt, max_rows) * c.audio.num_codebooks));
  auto fill_codes = [&](int64_t shift) {
    for (size_t i = 0; i < codes.size(); ++i)
      codes[i] = static_cast<int32_t>((i * 7919 + shift * 104729) % c.audio.codebook_size);
  };
  for (int64_t slot = 0; slot < max_rows; ++slot) {
    fill_codes(slot < 2 ? 0 : slot);
    HostRowTables t;
    for (int64_t p = 0; p < prompt; ++p) t.add(cache, slot, p);
    backbone.embed_frames(ws, codes, prompt, x->f32());
    backbone.forward(ws, x->f32(), prompt, t.upload(ws), cache);
  }
  fill_codes(0);
  b.synchronize();

  // Every timed step decodes position `prompt` of each branch (rewriting that KV row), so each
  // step does the same work; the row tables are uploaded once per batch size.
  nlohmann::json results = nlohmann::json::object();
  uint64_t moe_layers = 0, k_used = 0, expert_bytes = 0;
  for (const auto& l : w.backbone)
    if (!l.dense) {
      ++moe_layers;
      k_used = std::min<uint64_t>(c.moe.experts_per_token, l.moe.experts.size());
      expert_bytes = 2 * weight_bytes(l.moe.experts[0].gate) + weight_bytes(l.moe.experts[0].down);
    }
  bool expert_bytes_by_bench = false;
  // On CUDA every section is timed with the backend's grouped expert kernels (DRAMA_CUDA_EXPERTS)
  // under its plain name, then with v1, v2 and v3 under names ending _experts_v1 / _v2 / _v3 (the
  // expert products: _v1 / _v2 / _v3), side by side in this one run.
  std::vector<int> versions = {0};  // 0: the backend's own choice
#ifdef DRAMA_WITH_CUDA
  const bool on_cuda = b.name().rfind("cuda", 0) == 0;
  int default_version = 0;
  if (on_cuda) {
    default_version = cuda::set_moe_experts_version(b, 1);
    cuda::set_moe_experts_version(b, default_version);
    versions = {0, 1, 2, 3};
  }
  auto use_version = [&](int v) {
    if (on_cuda) cuda::set_moe_experts_version(b, v == 0 ? default_version : v);
  };
#else
  auto use_version = [](int) {};
#endif
  auto suffix = [](int v, const char* prefix) {
    return v == 0 ? std::string() : std::string(prefix) + std::to_string(v);
  };
  // (version, rows, captured): each version's step launched kernel by kernel, and the default
  // version's also as captured work (a CUDA graph: the frame step's form; on the CPU the same).
  // On CUDA the graphs also run with programmatic dependent launch off (names ending _no_pdl),
  // beside the default (on unless DRAMA_CUDA_PDL=0), and with the other BF16 product kernel
  // (tensor cores or CUDA cores, DRAMA_CUDA_LINEAR: names ending _linear_cores/_linear_tensor)
  // and with the other attention kernel (DRAMA_CUDA_ATTENTION: names ending _attention_v1/_v2),
  // and with the tensor-core products' weight tiles not staged where they are (the same bits,
  // DRAMA_CUDA_LINEAR_STAGED: names ending _unstaged), and with the staged products' general loop
  // where they take the lean one (the same bits, DRAMA_CUDA_LINEAR_LEAN: names ending _general).
  // Row counts beyond 2 (--step-rows) run as graphs only, named rows_N. The paired step also runs
  // as a graph with its two rows identical (paired_batch2_same_routing_graph): one routing for
  // both, as a trained model's guidance branches mostly choose (drama-mini's share 94% of their
  // experts: results/routing-overlap-drama-mini.json), where the plain paired rows (other frame
  // codes) route apart under the random router.
  struct StepRun {
    int version = 0;
    int64_t rows = 1;
    bool captured = false;
    bool no_pdl = false;
    bool other_linear = false;
    bool other_attention = false;
    bool same_rows = false;
    bool unstaged = false;
    bool general = false;
    // CUDA's tensor-core products in one layout at every row count (0: the default's choice by
    // rows; 1: narrow, 2: wide; the same bits: linear.cu).
    int linear_layout = 0;
  };
  std::vector<StepRun> step_runs;
  for (const int v : versions)
    for (const int64_t rows : {int64_t{1}, int64_t{2}})
      step_runs.push_back({.version = v, .rows = rows});
  for (const int64_t rows : all_rows) step_runs.push_back({.rows = rows, .captured = true});
  step_runs.push_back({.rows = 2, .captured = true, .same_rows = true});
#ifdef DRAMA_WITH_CUDA
  const bool pdl_default = on_cuda && cuda::set_programmatic_launch(b, true);
  bool tensor_default = false;
  int attention_default = 0;
  int64_t wide_default = 0;
  bool staged_default = false;
  bool lean_default = false;
  int64_t wide_linear_default = -1;
  if (on_cuda) {
    wide_default = cuda::set_wide_rows(b, 0);
    cuda::set_wide_rows(b, wide_default);
    cuda::set_programmatic_launch(b, pdl_default);
    tensor_default = cuda::set_tensor_linear(b, true);
    cuda::set_tensor_linear(b, tensor_default);
    attention_default = cuda::set_attention_version(b, 2);
    cuda::set_attention_version(b, attention_default);
    if (pdl_default)
      for (const int64_t rows : {int64_t{1}, int64_t{2}})
        step_runs.push_back({.rows = rows, .captured = true, .no_pdl = true});
    for (const int64_t rows : all_rows)
      step_runs.push_back({.rows = rows, .captured = true, .other_linear = true});
    for (const int64_t rows : all_rows)
      step_runs.push_back({.rows = rows, .captured = true, .other_attention = true});
    staged_default = cuda::set_linear_staged(b, false);
    cuda::set_linear_staged(b, staged_default);
    if (staged_default)
      for (const int64_t rows : all_rows)
        step_runs.push_back({.rows = rows, .captured = true, .unstaged = true});
    lean_default = cuda::set_linear_lean(b, false);
    cuda::set_linear_lean(b, lean_default);
    if (staged_default && lean_default)
      for (const int64_t rows : all_rows)
        step_runs.push_back({.rows = rows, .captured = true, .general = true});
    wide_linear_default = cuda::set_linear_wide_rows(b, -1);
    cuda::set_linear_wide_rows(b, wide_linear_default);
    for (const int layout : {1, 2})
      for (const int64_t rows : all_rows)
        if (rows >= 8)
          step_runs.push_back({.rows = rows, .captured = true, .linear_layout = layout});
  }
#endif
  auto rows_name = [](int64_t rows) {
    return rows == 1   ? std::string("batch1")
           : rows == 2 ? std::string("paired_batch2")
                       : "rows_" + std::to_string(rows);
  };
  // A step's row tables (branch slots 0..rows-1 at position `prompt`), uploaded; they live in the
  // workspace's kPositions buffer, which embed_frames leaves alone.
  auto step_tables = [&](int64_t rows) {
    HostRowTables host_tables;
    for (int64_t slot = 0; slot < rows; ++slot) host_tables.add(cache, slot, prompt);
    return host_tables.upload(ws);
  };
  // Every row its own frame codes, or (same) every row the first row's.
  std::vector<int32_t> same_codes;
  auto step_codes = [&](int64_t rows, bool same = false) {
    const size_t n = static_cast<size_t>(c.audio.num_codebooks * rows);
    if (!same) return std::span<const int32_t>(codes.data(), n);
    same_codes.resize(n);
    for (size_t i = 0; i < n; ++i) same_codes[i] = codes[i % c.audio.num_codebooks];
    return std::span<const int32_t>(same_codes);
  };
  // The step from frame ids already in device memory (as captured work takes it: no upload).
  auto step_from_ids = [&](const int32_t* ids, int64_t rows, const RowTables& tables) {
    backbone.embed_frame_ids(ws, ids, rows, x->f32());
    backbone.forward(ws, x->f32(), rows, tables, cache);
    backbone.final_norm(ws, x->f32(), rows, h->f32());
    backbone.codebook0_logits(ws, h->f32(), rows, logits->f32());
  };
  // Uploads the frame ids of `rows` branches once and returns where they are on the device.
  auto stage_ids = [&](int64_t rows, bool same) {
    backbone.embed_frames(ws, step_codes(rows, same), rows, x->f32());
    return static_cast<const int32_t*>(
        ws.i32(Buf::kIds, static_cast<size_t>(c.audio.num_codebooks * rows)));
  };
  for (const StepRun& run : step_runs) {
    // (plain names, not a structured binding: clang 14 does not capture those in lambdas)
    const int version = run.version;
    const int64_t rows = run.rows;
    const bool captured = run.captured;
    const bool same = run.same_rows;
    use_version(version);
#ifdef DRAMA_WITH_CUDA
    if (on_cuda) {
      cuda::set_programmatic_launch(b, run.no_pdl ? false : pdl_default);
      cuda::set_tensor_linear(b, run.other_linear ? !tensor_default : tensor_default);
      cuda::set_attention_version(b,
                                  run.other_attention ? 3 - attention_default : attention_default);
      cuda::set_linear_staged(b, run.unstaged ? false : staged_default);
      cuda::set_linear_lean(b, run.general ? false : lean_default);
      cuda::set_linear_wide_rows(b, run.linear_layout == 0   ? wide_linear_default
                                    : run.linear_layout == 1 ? 0
                                                             : 1);
    }
#endif
    const RowTables tables = step_tables(rows);
    std::vector<double> per_step;
    uint64_t step_bytes = 0, step_d2h = 0, step_h2d = 0, step_allocs = 0;
    const std::string key = "bench backbone " + std::to_string(rows) + (same ? " same" : "");
    std::string other_kernel;  // the name's suffix for a run with another kernel than the default
#ifdef DRAMA_WITH_CUDA
    if (run.other_linear) other_kernel = tensor_default ? "_linear_cores" : "_linear_tensor";
    if (run.other_attention) other_kernel = "_attention_v" + std::to_string(3 - attention_default);
    if (run.linear_layout)
      other_kernel = run.linear_layout == 1 ? "_linear_narrow" : "_linear_wide";
#endif
    const std::string name = rows_name(rows) + (same ? "_same_routing" : "") +
                             suffix(version, "_experts_v") + (captured ? "_graph" : "") +
                             (run.no_pdl ? "_no_pdl" : "") + other_kernel +
                             (run.unstaged ? "_unstaged" : "") + (run.general ? "_general" : "");
#ifdef DRAMA_WITH_CUDA
    // On CUDA the timed steps are an NVTX range named "steps NAME" (NAME as in the receipt), so a
    // trace with the graph's nodes (Nsight Systems --cuda-graph-trace=node;
    // bench/graph_timeline.py) can pick one replay of one step's graph.
    const std::string range = "steps " + name;
    if (on_cuda) cuda::push_range(range.c_str());
#endif
    for (int rep = 0; rep < repeats; ++rep) {
      const uint64_t before = ws.weight_bytes_read();
      const TransferCounters t0c = b.transfers();
      const auto t0 = Clock::now();
      if (!captured) {
        for (int64_t s = 0; s < steps; ++s) {
          backbone.embed_frames(ws, step_codes(rows, same), rows, x->f32());
          backbone.forward(ws, x->f32(), rows, tables, cache);
          backbone.final_norm(ws, x->f32(), rows, h->f32());
          backbone.codebook0_logits(ws, h->f32(), rows, logits->f32());
        }
      } else {
        // The frame ids uploaded once (a capture takes no upload); the rest as one sequence.
        const int32_t* ids = stage_ids(rows, same);
        for (int64_t s = 0; s < steps; ++s)
          ws.run_captured(key, [&] { step_from_ids(ids, rows, tables); });
      }
      b.synchronize();
      per_step.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / steps);
      const TransferCounters t1c = b.transfers();
      step_bytes = (ws.weight_bytes_read() - before) / steps;
      if (t1c.expert_weight_bytes == t0c.expert_weight_bytes) {
        // The backend does not count the experts it ran (CUDA: the choice stays on the device):
        // experts_per_token experts per MoE layer, exact for one row, the floor for two rows
        // (both branches on the same experts; disjoint ones read up to twice that).
        expert_bytes_by_bench = true;
        step_bytes += moe_layers * k_used * expert_bytes;
      }
      step_d2h = (t1c.d2h_calls - t0c.d2h_calls) / steps;
      step_h2d = (t1c.h2d_calls - t0c.h2d_calls) / steps;
      step_allocs = (t1c.allocs - t0c.allocs) / steps;
    }
#ifdef DRAMA_WITH_CUDA
    if (on_cuda) cuda::pop_range();
#endif
    const double t = median(per_step);
    nlohmann::json samples = nlohmann::json::array();
    for (double v : per_step) samples.push_back(v * 1e3);
    nlohmann::json& row = results[name];
    row = {{"rows", rows},
           {"per_step_ms", t * 1e3},
           {"samples_ms", samples},
           {"weight_bytes_per_step", step_bytes},
           {"effective_gb_s", step_bytes / t / 1e9},
           {"host_transfers_per_step",
            {{"d2h", step_d2h}, {"h2d", step_h2d}, {"allocs", step_allocs}}}};
#ifdef DRAMA_WITH_CUDA
    // Beside a graph's time: its launches, and a graph of as many empty kernels in a chain (the
    // step's floor from launches alone, measured in this run).
    if (captured && on_cuda) {
      const int64_t nodes = cuda::captured_graph_nodes(b, key);
      row["launches_per_step"] = nodes;
      if (nodes > 0)
        row["empty_launch_chain_ms"] = cuda::time_empty_kernel_chain(b, nodes, 20) * 1e3;
    }
#endif
  }

#ifdef DRAMA_WITH_CUDA
  if (on_cuda) {
    cuda::set_programmatic_launch(b, pdl_default);
    cuda::set_tensor_linear(b, tensor_default);
    cuda::set_attention_version(b, attention_default);
    cuda::set_linear_staged(b, staged_default);
    cuda::set_linear_lean(b, lean_default);
    cuda::set_linear_wide_rows(b, wide_linear_default);
  }
#endif
  // On CUDA: one launched step of each batch with every kernel timed alone (time_each_kernel):
  // where a step's time goes, kernel by kernel, beside the graph's time for the same step.
  nlohmann::json kernel_times = nlohmann::json::object();
#ifdef DRAMA_WITH_CUDA
  if (on_cuda) {
    use_version(0);
    for (const int64_t rows : all_rows) {
      const RowTables tables = step_tables(rows);
      const int32_t* ids = stage_ids(rows, false);
      // The embedding and the first layers' launches in order: which product is which. The step
      // is an NVTX range named "kernel_times ROWS_NAME" (Nsight Compute: --nvtx --nvtx-include
      // "kernel_times batch1/" profiles one step's kernels launched one by one).
      const std::string range = "kernel_times " + rows_name(rows);
      auto step = [&] {
        cuda::push_range(range.c_str());
        step_from_ids(ids, rows, tables);
        cuda::pop_range();
      };
      nlohmann::json table = kernel_table(cuda::time_each_kernel(b, step), 50);
      const std::string graph_key = rows_name(rows) + "_graph";
      table["graph_step_ms"] =
          results.contains(graph_key) ? results[graph_key]["per_step_ms"] : nlohmann::json();
      kernel_times[rows_name(rows)] = std::move(table);
    }
  }
#endif

  // The NVFP4 expert products of one MoE layer alone, through Backend::moe_experts (all rows'
  // experts, the choice on the device): one row, two rows sharing their experts, and two rows with
  // disjoint experts (as the guidance branches usually route); on CUDA also as one graph replay.
  nlohmann::json experts = nlohmann::json::object();
  int64_t moe_layer = -1;
  for (int64_t l = 0; l < bb.num_layers && moe_layer < 0; ++l)
    if (!w.backbone[l].dense) moe_layer = l;
  if (moe_layer >= 0) {
    const auto& ex = w.backbone[moe_layer].moe.experts;
    const int64_t n_stored = static_cast<int64_t>(ex.size());
    const int64_t k = std::min<int64_t>(c.moe.experts_per_token, n_stored);
    const int64_t I = c.moe.expert_intermediate_size;
    std::vector<ExpertWeights> table;
    for (const auto& e : ex) table.push_back({e.gate, e.up, e.down});
    // Beyond two rows (a busy server's steps): every row its own k experts, spread evenly over the
    // stored ones (rows x k / n_stored pairs an expert).
    const struct {
      const char* name;
      int64_t rows;
      bool disjoint;
    } cases[] = {{"rows1", 1, false},    {"rows2_shared", 2, false}, {"rows2_disjoint", 2, true},
                 {"rows64", 64, true},   {"rows128", 128, true},     {"rows192", 192, true},
                 {"rows256", 256, true}, {"rows512", 512, true}};
    // (The cases beyond two rows on CUDA only: on a CPU's cores they would take minutes each.)
    size_t n_cases = 3;
#ifdef DRAMA_WITH_CUDA
    if (on_cuda) n_cases = std::size(cases);
#endif
    int64_t most_rows = 1;
    for (size_t i = 0; i < n_cases; ++i) most_rows = std::max(most_rows, cases[i].rows);
    auto in = b.alloc(static_cast<size_t>(most_rows * H) * 4),
         out = b.alloc(static_cast<size_t>(most_rows * k * H) * 4),
         ids = b.alloc(static_cast<size_t>(most_rows * k) * 4),
         wsp = b.alloc(
             static_cast<size_t>(Backend::moe_workspace_floats(most_rows, k, H, I, n_stored)) * 4);
    ws.zero(in->f32(), static_cast<size_t>(most_rows * H));
    // (version, case, v3 in its own layout only): on CUDA version 3 also runs with its wide
    // layout off (names ending _v3_narrow), the layout rows pick otherwise (the same bits).
    struct ExpertRun {
      int version;
      size_t case_index;
      bool narrow;
    };
    std::vector<ExpertRun> expert_runs;
    for (const int v : versions)
      for (size_t i = 0; i < n_cases; ++i) expert_runs.push_back({v, i, false});
#ifdef DRAMA_WITH_CUDA
    if (on_cuda)
      for (size_t i = 0; i < n_cases; ++i) expert_runs.push_back({3, i, true});
#endif
    for (const ExpertRun& run : expert_runs) {
      const int version = run.version;
      const auto& cs = cases[run.case_index];
      use_version(version);
#ifdef DRAMA_WITH_CUDA
      if (on_cuda) cuda::set_wide_rows(b, run.narrow ? 0 : wide_default);
#endif
      const std::string name = cs.name + suffix(version, "_v") + (run.narrow ? "_narrow" : "");
      std::vector<int32_t> choice;
      for (int64_t r = 0; r < cs.rows; ++r)
        for (int64_t j = 0; j < k; ++j)
          choice.push_back(
              static_cast<int32_t>((j * 13 + (cs.disjoint ? r * k * 13 : 0) + 5) % n_stored));
      b.upload(ids->data(), choice.data(), choice.size() * 4);
      const auto* idx = static_cast<const int32_t*>(ids->data());
      std::vector<double> per;
      for (int rep = 0; rep < repeats; ++rep) {
        const int64_t calls = 50;
        const auto t0 = Clock::now();
        for (int64_t it = 0; it < calls; ++it)
          b.moe_experts(table.data(), n_stored, in->f32(), cs.rows, H, idx, k, k, out->f32(),
                        wsp->f32());
        b.synchronize();
        per.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / calls);
      }
      std::vector<int32_t> distinct = choice;
      std::sort(distinct.begin(), distinct.end());
      distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
      const double bytes = static_cast<double>(distinct.size()) *
                           (2 * weight_bytes(ex[0].gate) + weight_bytes(ex[0].down));
      const double t = median(per);
      experts[name] = {{"rows", cs.rows},
                       {"experts_read", distinct.size()},
                       {"us_per_layer", t * 1e6},
                       {"weight_bytes", bytes},
                       {"effective_gb_s", bytes / t / 1e9}};
#ifdef DRAMA_WITH_CUDA
      if (b.name().rfind("cuda", 0) == 0) {
        const double g = cuda::time_moe_experts_graph(b, table.data(), n_stored, in->f32(), cs.rows,
                                                      H, idx, k, k, out->f32(), wsp->f32(), 50);
        experts[std::string(cs.name) + "_graph" + suffix(version, "_v") +
                (run.narrow ? "_narrow" : "")] = {{"rows", cs.rows},
                                                  {"experts_read", distinct.size()},
                                                  {"us_per_layer", g * 1e6},
                                                  {"weight_bytes", bytes},
                                                  {"effective_gb_s", bytes / g / 1e9}};
      }
#endif
    }
#ifdef DRAMA_WITH_CUDA
    if (on_cuda) cuda::set_wide_rows(b, wide_default);
#endif
  }
  use_version(0);
  std::string experts_kernels = "the backend's";
#ifdef DRAMA_WITH_CUDA
  if (on_cuda) {
    experts_kernels =
        "CUDA grouped expert kernels v" + std::to_string(default_version) +
        " (DRAMA_CUDA_EXPERTS) for the plain names; v1, v2 and v3 for the names ending "
        "_experts_v1/_v2/_v3 (backbone_step) and _v1/_v2/_v3 (expert_products_one_layer); v3 runs "
        "its wide layout " +
        (wide_default < 0   ? std::string("where the experts average 12 pairs or more")
         : wide_default > 0 ? "from " + std::to_string(wide_default) + " rows on"
                            : std::string("never")) +
        " (DRAMA_CUDA_WIDE_ROWS), and the names ending _v3_narrow are v3 with it off (the same "
        "bits)";
  }
#endif
  const Ceiling ceil = measure_copy(b.name());
  // HBM serves reads and writes from one budget: the copy rate (bytes read + written) is the
  // rate at which a step can read its weights.
  const double read_rate = ceil.copy_bytes_per_s;
  for (auto& [key, section] : results.items()) {
    const double bytes = section["weight_bytes_per_step"].get<double>();
    section["copy_roofline_ms"] = bytes / read_rate * 1e3;
    section["fraction_of_copy_roofline"] =
        bytes / read_rate / (section["per_step_ms"].get<double>() * 1e-3);
  }
  for (auto& [key, section] : experts.items())
    section["fraction_of_copy_roofline"] = section["weight_bytes"].get<double>() / read_rate /
                                           (section["us_per_layer"].get<double>() * 1e-6);
  // The floor of paired guidance's batch of 2 against batch 1 (issue 13's goal: paired <= 1.1x
  // batch 1): the same weights but the experts, of which the two branches read the distinct
  // ones they choose. A model's branches see different prompts (with and without the voice), and
  // the synthetic model's random router makes their choices nearly independent: uniform routing.
  // (This bench's two rows share their prefilled prompt: on CUDA its weight bytes count
  // experts_per_token experts a layer for them, the floor; on the CPU the experts they chose.)
  nlohmann::json paired_uniform = "no MoE layer or no batch1 row";
  if (moe_layers > 0 && results.contains("batch1")) {
    const double batch1 = results["batch1"]["weight_bytes_per_step"].get<double>();
    const PairedRoofline p = paired_roofline_uniform(c, batch1, static_cast<double>(expert_bytes));
    constexpr double kGoal = 1.1;
    paired_uniform = {{"moe_layers", p.moe_layers},
                      {"experts_per_moe_layer_batch1", p.experts_batch1},
                      {"experts_per_moe_layer_paired", p.experts_paired},
                      {"weight_bytes_batch1", p.bytes_batch1},
                      {"weight_bytes_paired", p.bytes_paired},
                      {"copy_roofline_ms_batch1", p.bytes_batch1 / read_rate * 1e3},
                      {"copy_roofline_ms_paired", p.bytes_paired / read_rate * 1e3},
                      {"roofline_ratio", p.ratio},
                      {"goal_ratio", kGoal},
                      {"shared_experts_per_layer_for_goal", p.shared_experts_for(kGoal)}};
    for (const char* name : {"paired_batch2_graph", "paired_batch2_same_routing_graph"})
      if (results.contains(name) && results.contains("batch1_graph"))
        paired_uniform[std::string(name) == "paired_batch2_graph"
                           ? "measured_graph_ratio"
                           : "measured_graph_ratio_same_routing"] =
            results[name]["per_step_ms"].get<double>() /
            results["batch1_graph"]["per_step_ms"].get<double>();
    paired_uniform["note"] =
        "experts_per_moe_layer_paired: the distinct experts two rows choose under uniform "
        "routing, E (1 - (1 - k/E)^2); weight_bytes_paired: batch 1's weight bytes plus the "
        "experts beyond batch 1's k, each MoE layer; roofline_ratio: the paired step's copy-rate "
        "floor over batch 1's (a step at its roofline cannot be paired at less); "
        "shared_experts_per_layer_for_goal: the experts per layer the branches would have to "
        "share for that floor to be within goal_ratio; measured_graph_ratio: this run's graphed "
        "paired step over batch 1's (its two rows share their prompt but not their frame codes: "
        "they route apart, as under uniform routing); measured_graph_ratio_same_routing: the same "
        "with the two rows identical (one routing for both, as a trained model's branches mostly "
        "route: drama-mini's share 94% of their experts)";
  }
  nlohmann::json ceiling = {{"copy_gb_s", ceil.copy_bytes_per_s / 1e9},
                            {"what", ceil.what},
                            {"roofline_gb_s", read_rate / 1e9}};
  if (ceil.fma_flops_per_s > 0) ceiling["fma_tflops"] = ceil.fma_flops_per_s / 1e12;
  if (ceil.mma_flops_per_s > 0) ceiling["mma_bf16_tflops"] = ceil.mma_flops_per_s / 1e12;
  nlohmann::json j = {
      {"bench", "decode"},
      {"synthetic", std::filesystem::path(config_path).filename().string()},  // no paths
      {"backend", b.name()},
      {"device", ceil.device},
      {"model_bytes", synth.bytes()},
      {"build_s", build_s},
      {"steps", steps},
      {"repeats", repeats},
      {"position", prompt},
      {"backbone_step", results},
      {"expert_bytes_counted_by",
       expert_bytes_by_bench
           ? "the bench: experts_per_token experts per MoE layer (exact for one row; for two rows "
             "the floor, when both rows share their experts)"
           : "the backend (the experts moe_experts ran)"},
      {"expert_products_one_layer", experts},
      {"kernel_times",
       kernel_times.empty()
           ? nlohmann::json("CUDA only")
           : nlohmann::
                 json{{"what",
                       "one launched step, every kernel timed alone with device events (a spinning "
                       "kernel holds the stream while the next launch is queued: no launch "
                       "latency, "
                       "no gaps); every time includes the events' own cost, empty_kernel_us (an "
                       "empty kernel timed the same way in this run)"},
                      {"steps", kernel_times}}},
      {"expert_kernels", experts_kernels},
      {"paired_batch2_uniform_routing", paired_uniform},
      {"ceiling", ceiling},
      {"note",
       "backbone step = embed, every layer (attention with q/k norm and rotary, router, top-k, "
       "the routed experts, combine), final norm, codebook-0 head, through the model's own code "
       "(src/model) on synthetic weights; roofline = weight bytes read per step at the copy rate "
       "(bytes read + written per second: one memory budget serves both)"}};
  const std::string text = j.dump(2);
  std::printf("%s\n", text.c_str());
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << text << "\n";
    if (!f) throw Error("cannot write " + json_path);
  }
  return 0;
}

}  // namespace drama::cli
