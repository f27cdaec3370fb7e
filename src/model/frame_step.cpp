// The batched frame step (spec section 6, docs/model.md "Sessions and lanes"). A step:
//  1. ends cancelled sessions;
//  2. plans its rows: for every decoding session one row per branch that feeds its last frame
//     back, and prompt rows of joining sessions (oldest first) up to the prefill chunk; the
//     unconditional rows of separate-CFG sessions form a second pass;
//  3. uploads the plan (every table the kernels read) in one transfer;
//  4. runs the backbone over each pass, keeping each branch's newest hidden state;
//  5. for every session with a complete prompt: final norm, codebook-0 head, guidance, sampling,
//     then the tower position by position, each codebook sampled for all sessions in one call,
//     the sampled ids staying on the device for the next embedding;
//  6. reads the frame's codes and non-finite flags back in one transfer.
// Every kernel is batch invariant, so a session's codes never depend on the others.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <functional>
#include <string>

#include "model/lane.h"
#include "util/error.h"

namespace drama {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

constexpr size_t kAlign = 16;

// Host bytes of every table of a step, uploaded at once; offsets stay valid on the device.
class PlanBytes {
 public:
  template <class T>
  size_t put(const std::vector<T>& v) {
    bytes_.resize((bytes_.size() + kAlign - 1) / kAlign * kAlign);
    const size_t at = bytes_.size();
    bytes_.resize(at + v.size() * sizeof(T));
    if (!v.empty()) std::memcpy(bytes_.data() + at, v.data(), v.size() * sizeof(T));
    return at;
  }
  const std::vector<uint8_t>& bytes() const { return bytes_; }
  void clear() { bytes_.clear(); }

 private:
  std::vector<uint8_t> bytes_;
};

enum RowKind { kFeed, kFrame, kText, kKinds };

struct PlannedRow {
  int64_t lane = 0, branch = 0, position = 0, prompt_row = -1;
};

}  // namespace

void LaneBranch::load(const Prompt& p, const Drama3Config& c) {
  const int64_t K = c.audio.num_codebooks, stride = c.audio.codebook_size + 1;
  rows = p.rows;
  filled = 0;
  ids.assign(static_cast<size_t>(rows * K), 0);
  audio.assign(static_cast<size_t>(rows), 0);
  int64_t row = 0;
  for (const PromptRun& run : p.runs) {
    if (run.audio) {
      const int64_t n = static_cast<int64_t>(run.ids.size()) / K;
      for (int64_t f = 0; f < n; ++f, ++row) {
        audio[row] = 1;
        for (int64_t k = 0; k < K; ++k)
          ids[row * K + k] = static_cast<int32_t>(k * stride + run.ids[f * K + k]);
      }
    } else {
      for (int32_t id : run.ids) ids[row++ * K] = id;
    }
  }
}

size_t step_plan_bytes(int64_t lanes, int64_t rows, int64_t K) {
  const int64_t B = 2 * lanes, E = lanes;
  const int64_t words =
      rows * (2 * K + 3) + 2 * rows + B + E * (3 + 8 + 1) + 6 * B + 3 * B * K + 2 * B * K;
  const int64_t sections = 2 * 7 + 2 + 4 + 2 * 3 * K;
  return static_cast<size_t>(words) * 4 + static_cast<size_t>(sections) * kAlign + 4096;
}

// The step's tables (device offsets into the plan buffer) and host bookkeeping.
struct Drama3Model::Plan {
  struct Pass {
    int64_t row0 = 0, rows = 0, count[kKinds] = {};
    size_t feed_index = 0, feed_offset = 0, frame_ids = 0, text_ids = 0, tables = 0;
  };
  struct HeadPass {
    int64_t row0 = 0, rows = 0;
    size_t tables01 = 0;           // tower positions 0 and 1: [3, 2 * rows]
    std::vector<size_t> tables;    // positions i >= 2: [3, rows] each (index i - 2)
    std::vector<size_t> id_index;  // codebook i - 1's ids for position i: index i - 1
    std::vector<size_t> id_offset;
  };
  const uint8_t* base = nullptr;  // device address of the plan
  Pass pass[2];
  int64_t last_rows = 0;
  size_t last_src = 0, last_dst = 0;
  std::vector<int64_t> head_lanes;  // lane index of each session that makes a frame, in order
  int64_t head_rows = 0;
  HeadPass head[2];
  size_t head_src = 0, guide = 0, sample = 0, lane_dst = 0;
  bool prefill = false;

  // Back to an empty plan, keeping the vectors' storage.
  void reset() {
    base = nullptr;
    for (Pass& p : pass) p = Pass{};
    last_rows = 0;
    last_src = last_dst = 0;
    head_lanes.clear();
    head_rows = 0;
    for (HeadPass& h : head) {
      h.row0 = h.rows = 0;
      h.tables01 = 0;
      h.tables.clear();
      h.id_index.clear();
      h.id_offset.clear();
    }
    head_src = guide = sample = lane_dst = 0;
    prefill = false;
  }
  const int32_t* i32(size_t off) const { return reinterpret_cast<const int32_t*>(base + off); }
  RowTables tables(size_t off, int64_t n) const {
    return {i32(off), i32(off) + n, i32(off) + 2 * n};
  }
};

// Every host buffer a step plans in, kept from step to step: each is cleared (its storage
// kept) where the step used to make it, so a decode step allocates nothing once they have their
// sizes. Frame events' code vectors go back to a pool when the events are cleared.
struct Drama3Model::StepScratch {
  std::vector<StepEvent> events;
  std::vector<std::vector<int32_t>> code_pool;
  std::vector<PlannedRow> rows[2][kKinds];
  std::vector<char> heads;
  std::vector<int64_t> joining, head_row_of, head_session;
  PlanBytes bytes;
  Plan plan;
  std::vector<int32_t> last_src, last_dst, feed_index, feed_offset, frame_ids, text_ids, positions,
      row0, kv_row, head_src, lane_dst, pos, index, offset, codes;
  std::vector<GuidanceRow> guide;
  std::vector<SampleRow> sample;
  std::string key;

  void clear_events() {
    for (StepEvent& e : events)
      if (e.codes.capacity() > 0) code_pool.push_back(std::move(e.codes));
    events.clear();
  }
};

void Drama3Model::StepScratchDeleter::operator()(StepScratch* s) const {
  delete s;
}

const std::vector<StepEvent>& Drama3Model::step() {
  if (!scratch_) scratch_.reset(new StepScratch);
  StepScratch& sc = *scratch_;
  sc.clear_events();
  std::vector<StepEvent>& events = sc.events;
  for (Lane& l : lanes_) {
    if (!l.used) continue;
    if (l.cancel_requested || (l.spec.cancel && l.spec.cancel->load()))
      finish(l, StopReason::Cancelled, events);
    else if (l.frames_cap == 0)
      finish(l, StopReason::MaxFrames, events);
  }

  const int64_t K = config_.audio.num_codebooks, stride = config_.audio.codebook_size + 1;
  const int64_t L = capacity_.lanes;
  // --- 2. rows ---
  auto& rows = sc.rows;
  for (auto& pass_rows : rows)
    for (auto& kind_rows : pass_rows) kind_rows.clear();
  std::vector<char>& heads = sc.heads;
  heads.assign(static_cast<size_t>(L), 0);
  for (int64_t li = 0; li < L; ++li) {
    Lane& l = lanes_[li];
    if (!l.used || l.held || !l.prefilled()) continue;
    heads[li] = 1;
    if (l.frames > 0)
      for (int64_t b = 0; b < l.guide.branches(); ++b)
        rows[l.guide.pass(b)][kFeed].push_back({li, b, l.br[b].filled, -1});
  }
  std::vector<int64_t>& joining = sc.joining;
  joining.clear();
  for (int64_t li = 0; li < L; ++li)
    if (lanes_[li].used && !lanes_[li].held && !lanes_[li].prefilled()) joining.push_back(li);
  std::sort(joining.begin(), joining.end(),
            [&](int64_t a, int64_t b) { return lanes_[a].id < lanes_[b].id; });
  int64_t budget = capacity_.prefill_chunk, prefill_rows = 0;
  for (int64_t li : joining) {
    if (budget == 0) break;
    Lane& l = lanes_[li];
    bool complete = true;
    for (int64_t b = 0; b < l.guide.branches(); ++b) {
      LaneBranch& br = l.br[b];
      const int64_t take = std::min(budget, br.rows - br.filled);
      for (int64_t j = 0; j < take; ++j) {
        const int64_t r = br.filled + j;
        rows[l.guide.pass(b)][br.audio[r] ? kFrame : kText].push_back({li, b, r, r});
      }
      budget -= take;
      prefill_rows += take;
      if (br.filled + take < br.rows) complete = false;
    }
    if (complete) heads[li] = 1;
  }

  PlanBytes& bytes = sc.bytes;
  bytes.clear();
  Plan& plan = sc.plan;
  plan.reset();
  plan.prefill = prefill_rows > 0;
  // --- 3. the plan ---
  std::vector<int32_t>&last_src = sc.last_src, &last_dst = sc.last_dst;
  last_src.clear();
  last_dst.clear();
  int64_t row = 0;
  for (int p = 0; p < 2; ++p) {
    Plan::Pass& ps = plan.pass[p];
    ps.row0 = row;
    std::vector<int32_t>&feed_index = sc.feed_index, &feed_offset = sc.feed_offset,
    &frame_ids = sc.frame_ids, &text_ids = sc.text_ids, &positions = sc.positions, &row0 = sc.row0,
    &kv_row = sc.kv_row;
    for (std::vector<int32_t>* v :
         {&feed_index, &feed_offset, &frame_ids, &text_ids, &positions, &row0, &kv_row})
      v->clear();
    for (int kind = 0; kind < kKinds; ++kind) {
      ps.count[kind] = static_cast<int64_t>(rows[p][kind].size());
      for (const PlannedRow& r : rows[p][kind]) {
        const Lane& l = lanes_[r.lane];
        const LaneBranch& br = l.br[r.branch];
        const int64_t slot = 2 * r.lane + r.branch;
        if (kind == kFeed) {
          for (int64_t k = 0; k < K; ++k) {
            feed_index.push_back(static_cast<int32_t>(r.lane * (K + 1) + k));
            feed_offset.push_back(static_cast<int32_t>(k * stride));
          }
        } else if (kind == kFrame) {
          frame_ids.insert(frame_ids.end(), br.ids.begin() + r.prompt_row * K,
                           br.ids.begin() + (r.prompt_row + 1) * K);
        } else {
          text_ids.push_back(br.ids[r.prompt_row * K]);
        }
        positions.push_back(static_cast<int32_t>(r.position));
        row0.push_back(static_cast<int32_t>(backbone_cache_->row0(slot)));
        kv_row.push_back(static_cast<int32_t>(backbone_cache_->row0(slot) + r.position));
        if (kind == kFeed || r.prompt_row == br.rows - 1) {
          last_src.push_back(static_cast<int32_t>(row));
          last_dst.push_back(static_cast<int32_t>(slot));
        }
        ++row;
      }
    }
    ps.rows = row - ps.row0;
    ps.feed_index = bytes.put(feed_index);
    ps.feed_offset = bytes.put(feed_offset);
    ps.frame_ids = bytes.put(frame_ids);
    ps.text_ids = bytes.put(text_ids);
    positions.insert(positions.end(), row0.begin(), row0.end());
    positions.insert(positions.end(), kv_row.begin(), kv_row.end());
    ps.tables = bytes.put(positions);
  }
  plan.last_rows = static_cast<int64_t>(last_src.size());
  plan.last_src = bytes.put(last_src);
  plan.last_dst = bytes.put(last_dst);

  // Heads: B rows in pass order; guidance and sampling rows per session.
  std::vector<int32_t>&head_src = sc.head_src, &lane_dst = sc.lane_dst;
  head_src.clear();
  lane_dst.clear();
  std::vector<GuidanceRow>& guide = sc.guide;
  guide.clear();
  std::vector<SampleRow>& sample = sc.sample;
  sample.clear();
  std::vector<int64_t>& head_row_of = sc.head_row_of;  // [lane, branch]
  head_row_of.assign(static_cast<size_t>(2 * L), -1);
  for (int64_t li = 0; li < L; ++li)
    if (heads[li]) plan.head_lanes.push_back(li);
  const int64_t E = static_cast<int64_t>(plan.head_lanes.size());
  std::vector<int64_t>& head_session = sc.head_session;  // session index e of each head row
  head_session.clear();
  for (int p = 0; p < 2; ++p) {
    plan.head[p].row0 = static_cast<int64_t>(head_src.size());
    for (int64_t e = 0; e < E; ++e) {
      const Lane& l = lanes_[plan.head_lanes[e]];
      for (int64_t b = 0; b < l.guide.branches(); ++b) {
        if (l.guide.pass(b) != p) continue;
        head_row_of[2 * plan.head_lanes[e] + b] = static_cast<int64_t>(head_src.size());
        head_src.push_back(static_cast<int32_t>(2 * plan.head_lanes[e] + b));
        head_session.push_back(e);
      }
    }
    plan.head[p].rows = static_cast<int64_t>(head_src.size()) - plan.head[p].row0;
  }
  plan.head_rows = static_cast<int64_t>(head_src.size());
  for (int64_t e = 0; e < E; ++e) {
    const int64_t li = plan.head_lanes[e];
    const Lane& l = lanes_[li];
    GuidanceRow g;
    g.cond_row = static_cast<int32_t>(head_row_of[2 * li]);
    g.uncond_row = l.guide.guided() ? static_cast<int32_t>(head_row_of[2 * li + 1]) : -1;
    g.gamma = l.spec.options.gamma;
    guide.push_back(g);
    SampleRow s;
    s.temperature = l.spec.options.sampling.temperature;
    s.top_k = l.spec.options.sampling.top_k;
    s.top_p = l.spec.options.sampling.top_p;
    s.seed = l.spec.options.seed;
    s.frame = static_cast<uint64_t>(l.frames);
    sample.push_back(s);
    lane_dst.push_back(static_cast<int32_t>(li));
  }
  for (int p = 0; p < 2; ++p) {
    Plan::HeadPass& hp = plan.head[p];
    auto tower_tables = [&](std::initializer_list<int64_t> positions_of_block) {
      std::vector<int32_t>&pos = sc.pos, &row0 = sc.row0, &kv = sc.kv_row;
      pos.clear();
      row0.clear();
      kv.clear();
      for (int64_t position : positions_of_block)
        for (int64_t r = hp.row0; r < hp.row0 + hp.rows; ++r) {
          const int64_t slot = head_src[r];
          pos.push_back(static_cast<int32_t>(position));
          row0.push_back(static_cast<int32_t>(tower_cache_->row0(slot)));
          kv.push_back(static_cast<int32_t>(tower_cache_->row0(slot) + position));
        }
      pos.insert(pos.end(), row0.begin(), row0.end());
      pos.insert(pos.end(), kv.begin(), kv.end());
      return bytes.put(pos);
    };
    if (hp.rows == 0) continue;
    hp.tables01 = tower_tables({0, 1});
    for (int64_t i = 2; i < K; ++i) hp.tables.push_back(tower_tables({i}));
    for (int64_t i = 1; i < K; ++i) {
      std::vector<int32_t>&index = sc.index, &offset = sc.offset;
      index.clear();
      offset.clear();
      for (int64_t r = hp.row0; r < hp.row0 + hp.rows; ++r) {
        index.push_back(static_cast<int32_t>(head_session[r] * (K + 1) + i - 1));
        offset.push_back(static_cast<int32_t>((i - 1) * stride));
      }
      hp.id_index.push_back(bytes.put(index));
      hp.id_offset.push_back(bytes.put(offset));
    }
  }
  plan.head_src = bytes.put(head_src);
  plan.guide = bytes.put(guide);
  plan.sample = bytes.put(sample);
  plan.lane_dst = bytes.put(lane_dst);

  if (row == 0 && E == 0) return events;  // every session is held
  if (bytes.bytes().size() > plan_capacity_)
    throw Error("internal: a step plan of " + std::to_string(bytes.bytes().size()) +
                " bytes exceeds its buffer of " + std::to_string(plan_capacity_));
  const double t0 = now_s();
  const uint64_t weight0 = ws_.weight_bytes_read();
  backend_.upload(plan_buf_->data(), bytes.bytes().data(), bytes.bytes().size());
  plan.base = static_cast<const uint8_t*>(plan_buf_->data());

  // --- 4. backbone; 5. heads, tower, sampling ---
  // Between the upload and the read every launch and argument is a function of the plan's
  // shape (its row counts; the offsets into the plan follow from them), so a decode step runs
  // as captured work under that key (a CUDA graph, replayed). Prefill steps run as they come.
  double t1 = t0;
  auto work = [&] {
    run_backbone(plan);
    t1 = now_s();
    if (E > 0) run_heads(plan);
  };
  if (plan.prefill) {
    work();
  } else {
    std::string& key = sc.key;
    key.clear();
    auto put = [&key](int64_t n) {
      char digits[24];
      const auto end = std::to_chars(digits, digits + sizeof digits, n).ptr;
      key.push_back(':');
      key.append(digits, end);
    };
    key += "model";
    put(static_cast<int64_t>(capture_id_));
    key += " step";
    for (const Plan::Pass& ps : plan.pass)
      for (int64_t n : ps.count) put(n);
    for (const Plan::HeadPass& hp : plan.head) put(hp.rows);
    put(plan.last_rows);
    put(E);
    // std::ref: a std::function holds a reference_wrapper without allocating.
    if (ws_.run_captured(key, std::ref(work))) ++counters_.replayed_steps;
  }
  for (int p = 0; p < 2; ++p)
    for (int kind = 0; kind < kKinds; ++kind)
      for (const PlannedRow& r : rows[p][kind]) {
        ++lanes_[r.lane].br[r.branch].filled;
        ++backbone_rows_[r.branch];
      }

  // --- 6. one read ---
  std::vector<int32_t>& codes = sc.codes;
  codes.resize(static_cast<size_t>(E * (K + 1)));
  if (E > 0) backend_.download(codes.data(), codes_buf_->data(), codes.size() * sizeof(int32_t));
  const double t2 = now_s();
  for (int p = 0; p < 2; ++p)
    for (int64_t r = plan.head[p].row0; r < plan.head[p].row0 + plan.head[p].rows; ++r)
      tower_rows_[head_src[r] % 2] += K;  // positions 0..K-1 of each head row's branch
  if (plan.prefill) {
    timing_.prefill_s += t2 - t0;
  } else {
    timing_.backbone_s += t1 - t0;
    timing_.tower_s += t2 - t1;
    timing_.frames += E;
    timing_.decode_weight_bytes += ws_.weight_bytes_read() - weight0;
  }
  ++counters_.steps;
  counters_.backbone_rows += row;
  counters_.prefill_rows += prefill_rows;
  counters_.max_prefill_rows = std::max(counters_.max_prefill_rows, prefill_rows);

  for (int64_t e = 0; e < E; ++e) {
    Lane& l = lanes_[plan.head_lanes[e]];
    const int32_t* c = codes.data() + e * (K + 1);
    if (c[K] != 0) {
      finish(l, StopReason::Cancelled, events,
             "frame " + std::to_string(l.frames) + ": the logits of codebook " +
                 std::to_string(c[K] - 1) +
                 " hold NaN or Inf (a corrupted weight?); generation stopped");
      continue;
    }
    if (c[0] == config_.audio.eos_code && !l.spec.options.ignore_eos) {
      finish(l, StopReason::Eos, events);
      continue;
    }
    StepEvent& ev = events.emplace_back();
    ev.session = l.id;
    ev.frame = l.frames;
    if (!sc.code_pool.empty()) {
      ev.codes = std::move(sc.code_pool.back());
      sc.code_pool.pop_back();
    }
    ev.codes.assign(c, c + K);
    ++l.frames;
    ++counters_.frames;
    ++counters_.session_steps;
    if (l.frames == l.frames_cap)
      finish(l,
             l.frames_cap < l.spec.options.max_frames ? StopReason::PositionLimit
                                                      : StopReason::MaxFrames,
             events);
  }
  // Session order, stable (a session's frame before its end): an insertion sort, since
  // std::stable_sort takes a temporary buffer from the heap and the events are few.
  for (size_t i = 1; i < events.size(); ++i)
    for (size_t j = i; j > 0 && events[j].session < events[j - 1].session; --j)
      std::swap(events[j], events[j - 1]);
  return events;
}

void Drama3Model::run_backbone(const Plan& plan) {
  const int64_t H = backbone_->hidden();
  float* x = x_buf_->f32();
  int32_t* ids = reinterpret_cast<int32_t*>(ids_buf_->data());
  const int32_t* lane_codes = reinterpret_cast<const int32_t*>(lane_codes_buf_->data());
  const int64_t K = config_.audio.num_codebooks;
  for (int p = 0; p < 2; ++p) {
    const Plan::Pass& ps = plan.pass[p];
    if (ps.rows == 0) continue;
    float* xp = x + ps.row0 * H;
    const int64_t nf = ps.count[kFeed], na = ps.count[kFrame], nt = ps.count[kText];
    if (nf > 0) {
      backend_.gather_ids(lane_codes, plan.i32(ps.feed_index), plan.i32(ps.feed_offset), nf * K,
                          ids);
      backbone_->embed_frame_ids(ws_, ids, nf, xp);
    }
    backbone_->embed_frame_ids(ws_, plan.i32(ps.frame_ids), na, xp + nf * H);
    backbone_->embed_text_ids(ws_, plan.i32(ps.text_ids), nt, xp + (nf + na) * H);
    backbone_->forward(ws_, xp, ps.rows, plan.tables(ps.tables, ps.rows), *backbone_cache_);
  }
  if (plan.last_rows > 0)
    backend_.copy_rows(x, plan.i32(plan.last_src), last_buf_->f32(), plan.i32(plan.last_dst),
                       plan.last_rows, H);
}

void Drama3Model::run_heads(const Plan& plan) {
  const int64_t H = backbone_->hidden(), Ht = tower_->hidden();
  const int64_t K = config_.audio.num_codebooks, cs = config_.audio.codebook_size, V0 = cs + 1;
  const int64_t E = static_cast<int64_t>(plan.head_lanes.size()), B = plan.head_rows;
  float* hb = head_buf_->f32();
  float* hn = hnorm_buf_->f32();
  float* logits = logits_buf_->f32();
  float* combined = combined_buf_->f32();
  float* tx = tower_x_buf_->f32();
  int32_t* ids = reinterpret_cast<int32_t*>(ids_buf_->data());
  int32_t* codes = reinterpret_cast<int32_t*>(codes_buf_->data());
  const auto* guide = reinterpret_cast<const GuidanceRow*>(plan.base + plan.guide);
  const auto* sample = reinterpret_cast<const SampleRow*>(plan.base + plan.sample);

  backend_.copy_rows(last_buf_->f32(), plan.i32(plan.head_src), hb, nullptr, B, H);
  for (const Plan::HeadPass& hp : plan.head) {
    if (hp.rows == 0) continue;
    backbone_->final_norm(ws_, hb + hp.row0 * H, hp.rows, hn + hp.row0 * H);
    backbone_->codebook0_logits(ws_, hn + hp.row0 * H, hp.rows, logits + hp.row0 * V0);
  }
  backend_.guidance_combine(logits, V0, guide, E, combined);
  // The flag column (K) starts each step at 0 (0.0f has the bits of int32 0).
  backend_.fill(reinterpret_cast<float*>(codes + K), K + 1, E, 1, 0.0f);
  backend_.sample_rows(combined, V0, sample, E, 0, codes, codes + K, K + 1);

  for (int64_t i = 1; i < K; ++i) {
    for (const Plan::HeadPass& hp : plan.head) {
      if (hp.rows == 0) continue;
      const int64_t n = hp.rows;
      backend_.gather_ids(codes, plan.i32(hp.id_index[i - 1]), plan.i32(hp.id_offset[i - 1]), n,
                          ids);
      float* tp = tx + 2 * hp.row0 * Ht;
      if (i == 1) {
        // Positions 0 (P(h)) and 1 (P(E0(c0))) of every branch run together.
        tower_->project_hidden(ws_, hn + hp.row0 * H, n, tp);
        tower_->project_codes(ws_, ids, n, tp + n * Ht);
        tower_->forward(ws_, tp, 2 * n, plan.tables(hp.tables01, 2 * n), *tower_cache_);
        tower_->head_logits(ws_, i, tp + n * Ht, n, logits + hp.row0 * cs);
      } else {
        tower_->project_codes(ws_, ids, n, tp);
        tower_->forward(ws_, tp, n, plan.tables(hp.tables[i - 2], n), *tower_cache_);
        tower_->head_logits(ws_, i, tp, n, logits + hp.row0 * cs);
      }
    }
    backend_.guidance_combine(logits, cs, guide, E, combined);
    backend_.sample_rows(combined, cs, sample, E, i, codes + i, codes + K, K + 1);
  }
  // The frame's ids stay on the device for the next step's embedding (32-bit words copied
  // unchanged).
  backend_.copy_rows(reinterpret_cast<const float*>(codes), nullptr,
                     reinterpret_cast<float*>(lane_codes_buf_->data()), plan.i32(plan.lane_dst), E,
                     K + 1);
}

}  // namespace drama
