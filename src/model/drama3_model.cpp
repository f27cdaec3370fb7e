#include "model/drama3_model.h"

#include <algorithm>
#include <utility>

#include "model/lane.h"
#include "model/moe.h"
#include "util/error.h"

namespace drama {

namespace {

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

Drama3Model::Drama3Model(const Checkpoint& checkpoint, Backend& backend, ModelCapacity capacity)
    : Drama3Model(checkpoint.config(),
                  make_resident(backend, checkpoint.weights(), checkpoint.config()), backend,
                  capacity) {}

Drama3Model::Drama3Model(const Drama3Config& config, ModelWeights resident, Backend& backend,
                         ModelCapacity capacity)
    : backend_(backend),
      config_(config),
      capacity_(capacity),
      max_positions_(capacity.max_positions > 0 ? capacity.max_positions
                                                : config.backbone.max_position_embeddings),
      resident_(std::move(resident)),
      ws_(backend),
      capture_id_([] {
        static std::atomic<uint64_t> next{1};
        return next.fetch_add(1);
      }()) {
  if (capacity_.lanes < 1) throw Error("the model needs at least one lane");
  if (capacity_.prefill_chunk < 1) throw Error("the prefill chunk must be at least one row");
  if (capacity_.max_positions < 0 || max_positions_ > config_.backbone.max_position_embeddings)
    throw Error("the context of " + std::to_string(capacity_.max_positions) +
                " positions is outside 1.." +
                std::to_string(config_.backbone.max_position_embeddings) +
                " (the model's max_position_embeddings)");
  backbone_ = std::make_unique<Backbone>(backend, config_, resident_);
  tower_ = std::make_unique<Tower>(backend, config_, resident_);
  lanes_.resize(static_cast<size_t>(capacity_.lanes));

  // Everything a step touches, allocated once for the largest step.
  const int64_t L = capacity_.lanes, K = config_.audio.num_codebooks;
  const int64_t H = backbone_->hidden(), Ht = tower_->hidden();
  const int64_t cs = config_.audio.codebook_size, V = std::max(cs + 1, cs);
  const int64_t slots = 2 * L, R = slots + capacity_.prefill_chunk, B = slots;
  backbone_cache_ = std::make_unique<KvPool>(backend, config_.backbone.num_layers, slots,
                                             max_positions_, backbone_->stack().shape().kv_dim());
  tower_cache_ =
      std::make_unique<KvPool>(backend, config_.tower.num_layers, slots, K, tower_->kv_dim());
  auto floats = [&](int64_t n) { return backend.alloc(static_cast<size_t>(n) * sizeof(float)); };
  x_buf_ = floats(R * H);
  last_buf_ = floats(slots * H);
  head_buf_ = floats(B * H);
  hnorm_buf_ = floats(B * H);
  logits_buf_ = floats(B * V);
  combined_buf_ = floats(L * V);
  tower_x_buf_ = floats(2 * B * Ht);
  ids_buf_ = floats(std::max(R * K, 2 * B));
  codes_buf_ = floats(L * (K + 1));
  lane_codes_buf_ = floats(L * (K + 1));
  plan_capacity_ = step_plan_bytes(L, R, K);
  plan_buf_ = backend.alloc(plan_capacity_);
  backbone_->stack().reserve(ws_, R);
  tower_->reserve(ws_, 2 * B);
}

Drama3Model::~Drama3Model() {
  backend_.forget_captured();  // its steps name this model's buffers
}

void Drama3Model::set_masked_experts_for_test(const std::vector<std::vector<int32_t>>& per_layer) {
  for (int64_t l = 0; l < backbone_->stack().num_layers(); ++l)
    if (MoeBlock* m = backbone_->stack().moe(l))
      m->set_masked_experts(l < static_cast<int64_t>(per_layer.size()) ? per_layer[l]
                                                                       : std::vector<int32_t>{});
  ws_.forget_captured();  // the masks are launches the step keys do not describe
}

void Drama3Model::check_prompt(const Prompt& p, const char* which) const {
  const int64_t limit = max_positions_;
  if (p.rows > limit)
    throw Error(std::string("the ") + which + " prompt has " + std::to_string(p.rows) +
                " positions, more than the " + std::to_string(limit) +
                " positions the model's context holds (" +
                (limit == config_.backbone.max_position_embeddings
                     ? std::string("max_position_embeddings")
                     : "the context chosen at load; max_position_embeddings is " +
                           std::to_string(config_.backbone.max_position_embeddings)) +
                "); shorten the text or the reference voice");
  if (p.rows == 0) throw Error(std::string("the ") + which + " prompt is empty");
}

int64_t Drama3Model::active_sessions() const {
  int64_t n = 0;
  for (const Lane& l : lanes_) n += l.used;
  return n;
}

Drama3Model::Lane* Drama3Model::find(uint64_t session) {
  for (Lane& l : lanes_)
    if (l.used && l.id == session) return &l;
  return nullptr;
}

uint64_t Drama3Model::join(SessionSpec spec) {
  check_prompt(spec.cond, "conditional");
  if (spec.uncond) check_prompt(*spec.uncond, "unconditional");
  auto free = std::find_if(lanes_.begin(), lanes_.end(), [](const Lane& l) { return !l.used; });
  if (free == lanes_.end())
    throw Error("all " + std::to_string(capacity_.lanes) + " lanes of the model are in use");
  Lane& lane = *free;
  lane = Lane{};
  lane.used = true;
  lane.id = next_session_++;
  lane.guide = GuidancePair(spec.uncond.has_value(), spec.options.gamma, spec.options.cfg);
  lane.spec = std::move(spec);
  const int64_t max_pos = max_positions_;
  // Frame t is predicted from position rows - 1 + t, so a branch of `rows` positions can make
  // at most max_pos - rows + 1 frames.
  int64_t limit = lane.spec.options.max_frames;
  for (int64_t b = 0; b < lane.guide.branches(); ++b) {
    const Prompt& p = b == 0 ? lane.spec.cond : *lane.spec.uncond;
    lane.br[b].load(p, config_);
    limit = std::min(limit, max_pos - p.rows + 1);
  }
  lane.frames_cap = std::max<int64_t>(limit, 0);
  return lane.id;
}

void Drama3Model::cancel(uint64_t session) {
  if (Lane* l = find(session)) l->cancel_requested = true;
}

void Drama3Model::hold(uint64_t session, bool held) {
  if (Lane* l = find(session)) l->held = held;
}

void Drama3Model::finish(Lane& lane, StopReason stop, std::vector<StepEvent>& events,
                         const std::string& error) {
  StepEvent e;
  e.session = lane.id;
  e.finished = true;
  e.frame = lane.frames;
  e.stop = stop;
  e.error = error;
  events.push_back(std::move(e));
  lane = Lane{};
}

GenerationResult Drama3Model::generate(const Prompt& cond, const Prompt* uncond,
                                       const GenerationOptions& options,
                                       const FrameCallback& on_frame,
                                       const std::atomic<bool>* cancel) {
  if (active_sessions() != 0) throw Error("generate() runs a session alone; sessions are active");
  SessionSpec spec;
  spec.cond = cond;
  if (uncond) spec.uncond = *uncond;
  spec.options = options;
  spec.cancel = cancel;
  const uint64_t id = join(std::move(spec));
  GenerationResult result;
  bool refused = false;
  for (;;) {
    const std::vector<StepEvent>& events = step();
    bool ended = false;
    for (const StepEvent& e : events) {
      if (e.session != id) continue;
      if (e.finished) {
        if (!e.error.empty()) throw Error(e.error);
        if (!refused) result.stop = e.stop;
        ended = true;
        continue;
      }
      result.codes.insert(result.codes.end(), e.codes.begin(), e.codes.end());
      ++result.frames;
      if (on_frame && !on_frame(e.frame, e.codes)) {
        refused = true;
        result.stop = StopReason::Cancelled;
        this->cancel(id);
      }
    }
    if (ended) return result;
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
  KvPool cache(backend_, config_.backbone.num_layers, 1, rows, backbone_->stack().shape().kv_dim());
  auto xb = backend_.alloc(static_cast<size_t>(rows * H) * sizeof(float));
  float* x = xb->f32();
  backbone_->embed_prompt(ws_, prompt, x);
  if (frames > 1) backbone_->embed_frames(ws_, codes, frames - 1, x + P * H);
  HostRowTables t;
  for (int64_t i = 0; i < rows; ++i) t.add(cache, 0, i);
  backbone_->forward(ws_, x, rows, t.upload(ws_), cache);
  auto hb = backend_.alloc(static_cast<size_t>(frames * H) * sizeof(float));
  auto lb = backend_.alloc(static_cast<size_t>(frames * V0) * sizeof(float));
  float* hn = hb->f32();
  backbone_->final_norm(ws_, x + (P - 1) * H, frames, hn);
  backbone_->codebook0_logits(ws_, hn, frames, lb->f32());
  out.codebook0.resize(frames * V0);
  backend_.download(out.codebook0.data(), lb->f32(), out.codebook0.size() * sizeof(float));

  out.tower.resize(frames * (K - 1) * cs);
  KvPool tcache(backend_, config_.tower.num_layers, 1, K, tower_->kv_dim());
  HostRowTables tt;
  for (int64_t i = 0; i < K; ++i) tt.add(tcache, 0, i);
  auto txb = backend_.alloc(static_cast<size_t>(K * Ht) * sizeof(float));
  auto tlb = backend_.alloc(static_cast<size_t>(cs) * sizeof(float));
  float* tx = txb->f32();
  for (int64_t t = 0; t < frames; ++t) {
    tower_->project_hidden(ws_, hn + t * H, 1, tx);
    std::vector<int32_t> ids;
    for (int64_t i = 1; i < K; ++i)
      ids.push_back(static_cast<int32_t>((i - 1) * (cs + 1) + codes[t * K + i - 1]));
    if (K > 1) tower_->project_codes(ws_, ws_.upload_i32(Buf::kIds, ids), K - 1, tx + Ht);
    tower_->forward(ws_, tx, K, tt.upload(ws_), tcache);
    for (int64_t i = 1; i < K; ++i) {
      tower_->head_logits(ws_, i, tx + i * Ht, 1, tlb->f32());
      backend_.download(out.tower.data() + (t * (K - 1) + i - 1) * cs, tlb->f32(),
                        cs * sizeof(float));
    }
  }
  return out;
}

}  // namespace drama
