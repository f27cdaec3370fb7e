#include "model/drama3_model.h"

#include <algorithm>
#include <chrono>

#include "model/moe.h"
#include "util/error.h"

namespace drama {

namespace {

enum Scratch : size_t {
  kX,
  kLast,
  kHnorm,
  kLogits0,
  kCombined0,
  kTowerX,
  kTowerTmp,
  kTowerLogits,
  kTowerCombined,
  kScratchCount
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

LayerWeights resident_layer(Backend& be, const LayerWeights& l, int64_t hidden, int64_t head_dim) {
  LayerWeights r = l;
  auto vec = [&](const uint16_t* p, int64_t n) {
    return static_cast<const uint16_t*>(be.resident_bytes(p, static_cast<size_t>(n) * 2));
  };
  auto mlp = [&](const MlpWeights& m) {
    return MlpWeights{be.resident(m.gate), be.resident(m.up), be.resident(m.down)};
  };
  r.input_norm = vec(l.input_norm, hidden);
  r.post_attn_norm = vec(l.post_attn_norm, hidden);
  r.attn.q = be.resident(l.attn.q);
  r.attn.k = be.resident(l.attn.k);
  r.attn.v = be.resident(l.attn.v);
  r.attn.o = be.resident(l.attn.o);
  r.attn.q_norm = vec(l.attn.q_norm, head_dim);
  r.attn.k_norm = vec(l.attn.k_norm, head_dim);
  if (l.dense) {
    r.mlp = mlp(l.mlp);
  } else {
    r.moe.router = be.resident(l.moe.router);
    for (size_t s = 0; s < l.moe.experts.size(); ++s) r.moe.experts[s] = mlp(l.moe.experts[s]);
    if (l.moe.shared_expert) {
      r.moe.shared_expert = mlp(*l.moe.shared_expert);
      r.moe.shared_expert_gate = be.resident(l.moe.shared_expert_gate);
    }
  }
  return r;
}

}  // namespace

struct Drama3Model::Branch {
  const Prompt* prompt = nullptr;
  std::unique_ptr<KvCache> backbone_cache, tower_cache;
  int64_t next_position = 0;
};

ModelWeights make_resident(Backend& be, const ModelWeights& host, const Drama3Config& c) {
  ModelWeights r = host;
  const int64_t H = c.backbone.hidden_size, Ht = c.tower.hidden_size;
  const int64_t K = c.audio.num_codebooks, cs = c.audio.codebook_size;
  auto vec = [&](const uint16_t* p, int64_t n) {
    return static_cast<const uint16_t*>(be.resident_bytes(p, static_cast<size_t>(n) * 2));
  };
  r.text_embed = vec(host.text_embed, c.text.vocab_size * H);
  r.audio_embed = vec(host.audio_embed, K * (cs + 1) * H);
  for (size_t l = 0; l < host.backbone.size(); ++l)
    r.backbone[l] = resident_layer(be, host.backbone[l], H, c.backbone.head_dim);
  r.backbone_norm = vec(host.backbone_norm, H);
  r.codebook0_head = be.resident(host.codebook0_head);
  r.tower_input_proj = be.resident(host.tower_input_proj);
  for (size_t l = 0; l < host.tower.size(); ++l)
    r.tower[l] = resident_layer(be, host.tower[l], Ht, c.tower.head_dim);
  r.tower_norm = vec(host.tower_norm, Ht);
  for (size_t i = 0; i < host.tower_heads.size(); ++i)
    r.tower_heads[i] = be.resident(host.tower_heads[i]);
  return r;
}

Drama3Model::Drama3Model(const Checkpoint& checkpoint, Backend& backend)
    : backend_(backend),
      config_(checkpoint.config()),
      resident_(make_resident(backend, checkpoint.weights(), checkpoint.config())),
      exec_(backend),
      scratch_(kScratchCount) {
  backbone_ = std::make_unique<Backbone>(backend, config_, resident_);
  tower_ = std::make_unique<Tower>(backend, config_, resident_);
}

Drama3Model::~Drama3Model() = default;

float* Drama3Model::scratch(size_t which, size_t floats) {
  auto& buf = scratch_[which];
  const size_t bytes = std::max<size_t>(floats, 16) * sizeof(float);
  if (!buf || buf->bytes() < bytes) buf = backend_.alloc(bytes);
  return buf->f32();
}

void Drama3Model::set_masked_experts_for_test(const std::vector<std::vector<int32_t>>& per_layer) {
  for (int64_t l = 0; l < backbone_->stack().num_layers(); ++l)
    if (MoeBlock* m = backbone_->stack().moe(l))
      m->set_masked_experts(l < static_cast<int64_t>(per_layer.size()) ? per_layer[l]
                                                                       : std::vector<int32_t>{});
}

void Drama3Model::check_prompt(const Prompt& p, const char* which) const {
  const int64_t limit = config_.backbone.max_position_embeddings;
  if (p.rows > limit)
    throw Error(std::string("the ") + which + " prompt has " + std::to_string(p.rows) +
                " positions, more than the model's max_position_embeddings " +
                std::to_string(limit) + "; shorten the text or the reference voice");
  if (p.rows == 0) throw Error(std::string("the ") + which + " prompt is empty");
}

GenerationResult Drama3Model::generate(const Prompt& cond, const Prompt* uncond,
                                       const GenerationOptions& options,
                                       const FrameCallback& on_frame,
                                       const std::atomic<bool>* cancel) {
  check_prompt(cond, "conditional");
  if (uncond) check_prompt(*uncond, "unconditional");
  const GuidancePair guide(uncond != nullptr, options.gamma, options.cfg);
  const FrameSampler sampler(options.sampling, options.seed);
  const int64_t nb = guide.branches();
  const int64_t H = backbone_->hidden(), K = config_.audio.num_codebooks;
  const int64_t V0 = config_.audio.codebook_size + 1;
  const int64_t max_pos = config_.backbone.max_position_embeddings;

  std::vector<Branch> br(nb);
  br[0].prompt = &cond;
  if (nb == 2) br[1].prompt = uncond;
  // Frame t is predicted from position rows - 1 + t, so a branch of `rows` positions can make
  // at most max_pos - rows + 1 frames.
  int64_t limit_frames = options.max_frames;
  for (const Branch& b : br) limit_frames = std::min(limit_frames, max_pos - b.prompt->rows + 1);
  const int64_t frames_cap = std::max<int64_t>(limit_frames, 0);
  GenerationResult result;
  if (frames_cap == 0) return result;
  int64_t total_rows = 0;
  for (Branch& b : br) {
    const int64_t cap = std::min(max_pos, b.prompt->rows + frames_cap - 1);
    b.backbone_cache = std::make_unique<KvCache>(backend_, config_.backbone.num_layers, cap,
                                                 backbone_->stack().shape().kv_dim());
    b.tower_cache =
        std::make_unique<KvCache>(backend_, config_.tower.num_layers, K, tower_->kv_dim());
    total_rows += b.prompt->rows;
  }

  // Prefill: all prompt rows of a group's branches as one batch through each layer.
  const double t_prefill = now_s();
  float* last = scratch(kLast, nb * H);
  float* x = scratch(kX, total_rows * H);
  for (const auto& group : guide.groups()) {
    std::vector<Segment> segs;
    int64_t row = 0;
    for (int64_t b : group) {
      backbone_->embed_prompt(exec_, *br[b].prompt, x + row * H);
      segs.push_back({br[b].backbone_cache.get(), row, br[b].prompt->rows, 0});
      row += br[b].prompt->rows;
    }
    backbone_->forward(exec_, x, row, segs);
    for (size_t i = 0; i < group.size(); ++i) {
      const int64_t b = group[i];
      exec_.copy_rows(x + (segs[i].row0 + segs[i].rows - 1) * H, 1, H, last + b * H);
      backbone_rows_[b] += segs[i].rows;
      br[b].next_position = segs[i].rows;
    }
  }
  backend_.synchronize();
  timing_.prefill_s += now_s() - t_prefill;

  float* hnorm = scratch(kHnorm, nb * H);
  float* logits0 = scratch(kLogits0, nb * V0);
  float* combined0 = scratch(kCombined0, V0);
  std::vector<int32_t> codes(K);
  for (int64_t t = 0;; ++t) {
    if (cancel && cancel->load()) {
      result.stop = StopReason::Cancelled;
      break;
    }
    const uint64_t bytes0 = exec_.traffic.bytes;
    double t0 = now_s();
    for (const auto& group : guide.groups()) {
      const int64_t g0 = group.front(), n = static_cast<int64_t>(group.size());
      backbone_->final_norm(exec_, last + g0 * H, n, hnorm + g0 * H);
      backbone_->codebook0_logits(exec_, hnorm + g0 * H, n, logits0 + g0 * V0);
    }
    codes[0] = sampler.draw(backend_, guide.combine(backend_, logits0, V0, combined0), V0, t, 0);
    double t1 = now_s();
    timing_.backbone_s += t1 - t0;
    if (codes[0] == config_.audio.eos_code) {
      result.stop = StopReason::Eos;
      break;
    }
    tower_frame(guide, br, hnorm, sampler, t, codes);
    backend_.synchronize();
    double t2 = now_s();
    timing_.tower_s += t2 - t1;
    result.codes.insert(result.codes.end(), codes.begin(), codes.end());
    ++result.frames;
    ++timing_.frames;
    if (on_frame && !on_frame(t, codes)) {
      timing_.decode_weight_bytes += exec_.traffic.bytes - bytes0;
      result.stop = StopReason::Cancelled;
      break;
    }
    if (result.frames == frames_cap) {
      timing_.decode_weight_bytes += exec_.traffic.bytes - bytes0;
      result.stop =
          frames_cap < options.max_frames ? StopReason::PositionLimit : StopReason::MaxFrames;
      break;
    }
    // Feed the frame to every branch (the sampled codes go to both).
    for (const auto& group : guide.groups()) {
      const int64_t n = static_cast<int64_t>(group.size());
      std::vector<int32_t> rep;
      std::vector<Segment> segs;
      for (int64_t i = 0; i < n; ++i) {
        rep.insert(rep.end(), codes.begin(), codes.end());
        Branch& b = br[group[i]];
        segs.push_back({b.backbone_cache.get(), i, 1, b.next_position});
      }
      backbone_->embed_frames(exec_, rep, n, x);
      backbone_->forward(exec_, x, n, segs);
      for (int64_t i = 0; i < n; ++i) {
        exec_.copy_rows(x + i * H, 1, H, last + group[i] * H);
        ++br[group[i]].next_position;
        ++backbone_rows_[group[i]];
      }
    }
    backend_.synchronize();
    timing_.backbone_s += now_s() - t2;
    timing_.decode_weight_bytes += exec_.traffic.bytes - bytes0;
  }
  return result;
}

void Drama3Model::tower_frame(const GuidancePair& guide, std::vector<Branch>& br,
                              const float* hnorm, const FrameSampler& sampler, int64_t frame,
                              std::vector<int32_t>& codes) {
  const int64_t K = config_.audio.num_codebooks, cs = config_.audio.codebook_size;
  const int64_t H = backbone_->hidden(), Ht = tower_->hidden(), nb = guide.branches();
  float* tx = scratch(kTowerX, 2 * nb * Ht);
  float* tmp = scratch(kTowerTmp, 2 * nb * Ht);
  float* logits = scratch(kTowerLogits, nb * cs);
  float* combined = scratch(kTowerCombined, cs);
  for (int64_t i = 1; i < K; ++i) {
    for (const auto& group : guide.groups()) {
      const int64_t g0 = group.front(), n = static_cast<int64_t>(group.size());
      std::vector<Segment> segs;
      std::vector<int64_t> head_rows;
      if (i == 1) {
        // Positions 0 (P(h)) and 1 (P(E0(c0))) of each branch run together.
        tower_->project_hidden(exec_, hnorm + g0 * H, n, tmp);
        std::vector<int32_t> books(n, 0), code(n, codes[0]);
        tower_->project_codes(exec_, books, code, tmp + n * Ht);
        for (int64_t j = 0; j < n; ++j) {
          exec_.copy_rows(tmp + j * Ht, 1, Ht, tx + (2 * j) * Ht);
          exec_.copy_rows(tmp + (n + j) * Ht, 1, Ht, tx + (2 * j + 1) * Ht);
          segs.push_back({br[group[j]].tower_cache.get(), 2 * j, 2, 0});
          head_rows.push_back(2 * j + 1);
          tower_rows_[group[j]] += 2;
        }
        tower_->forward(exec_, tx, 2 * n, segs);
      } else {
        std::vector<int32_t> books(n, static_cast<int32_t>(i - 1)), code(n, codes[i - 1]);
        tower_->project_codes(exec_, books, code, tx);
        for (int64_t j = 0; j < n; ++j) {
          segs.push_back({br[group[j]].tower_cache.get(), j, 1, i});
          head_rows.push_back(j);
          tower_rows_[group[j]] += 1;
        }
        tower_->forward(exec_, tx, n, segs);
      }
      tower_->head_logits(exec_, i, tx, head_rows, logits + g0 * cs);
    }
    codes[i] = sampler.draw(backend_, guide.combine(backend_, logits, cs, combined), cs, frame, i);
  }
}

TeacherForcedLogits Drama3Model::teacher_forced(const Prompt& prompt,
                                                std::span<const int32_t> codes, int64_t frames) {
  check_prompt(prompt, "teacher-forced");
  const int64_t H = backbone_->hidden(), Ht = tower_->hidden(), K = config_.audio.num_codebooks;
  const int64_t cs = config_.audio.codebook_size, V0 = cs + 1, P = prompt.rows;
  TeacherForcedLogits out;
  if (frames <= 0) return out;
  const int64_t rows = P + frames - 1;
  if (rows > config_.backbone.max_position_embeddings)
    throw Error("prompt and codes need " + std::to_string(rows) +
                " positions, more than max_position_embeddings " +
                std::to_string(config_.backbone.max_position_embeddings));
  KvCache cache(backend_, config_.backbone.num_layers, rows, backbone_->stack().shape().kv_dim());
  float* x = scratch(kX, rows * H);
  backbone_->embed_prompt(exec_, prompt, x);
  if (frames > 1) backbone_->embed_frames(exec_, codes, frames - 1, x + P * H);
  const Segment seg{&cache, 0, rows, 0};
  backbone_->forward(exec_, x, rows, {&seg, 1});
  float* hn = scratch(kHnorm, frames * H);
  float* l0 = scratch(kLogits0, frames * V0);
  backbone_->final_norm(exec_, x + (P - 1) * H, frames, hn);
  backbone_->codebook0_logits(exec_, hn, frames, l0);
  out.codebook0.resize(frames * V0);
  backend_.download(out.codebook0.data(), l0, out.codebook0.size() * sizeof(float));

  out.tower.resize(frames * (K - 1) * cs);
  KvCache tcache(backend_, config_.tower.num_layers, K, tower_->kv_dim());
  float* tx = scratch(kTowerX, K * Ht);
  float* tl = scratch(kTowerLogits, cs);
  for (int64_t t = 0; t < frames; ++t) {
    tower_->project_hidden(exec_, hn + t * H, 1, tx);
    std::vector<int32_t> books, code;
    for (int64_t i = 1; i < K; ++i) {
      books.push_back(static_cast<int32_t>(i - 1));
      code.push_back(codes[t * K + i - 1]);
    }
    if (K > 1) tower_->project_codes(exec_, books, code, tx + Ht);
    const Segment tseg{&tcache, 0, K, 0};
    tower_->forward(exec_, tx, K, {&tseg, 1});
    for (int64_t i = 1; i < K; ++i) {
      const int64_t row = i;
      tower_->head_logits(exec_, i, tx, {&row, 1}, tl);
      backend_.download(out.tower.data() + (t * (K - 1) + i - 1) * cs, tl, cs * sizeof(float));
    }
  }
  return out;
}

}  // namespace drama
