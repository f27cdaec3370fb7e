// The Drama-3 model on one backend (spec sections 1, 5, 6), serving up to `lanes` sessions at
// once. One batched step advances every active session by one frame: the rows of all sessions
// (one per guidance branch, plus the prompt rows of joining sessions, in bounded chunks) go
// through the backbone together, each row attending to its own session's cache; then codebook 0,
// the tower and codebooks 1..K-1 run once for all sessions, each codebook position sampled for
// every session in one call. The only read back to the host per step is the frame's codes with
// their non-finite flags. Written once against backend.h; every backend runs this same code.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "format/checkpoint.h"
#include "model/backbone.h"
#include "model/kv_pool.h"
#include "model/session.h"
#include "model/tower.h"
#include "model/workspace.h"

namespace drama {

struct GenerationResult {
  std::vector<int32_t> codes;  // [frames, K]
  int64_t frames = 0;
  StopReason stop = StopReason::MaxFrames;
};

// Called with each frame's K codes; return false to stop (the frame has been emitted).
using FrameCallback = std::function<bool(int64_t frame, std::span<const int32_t> codes)>;

struct TeacherForcedLogits {
  std::vector<float> codebook0;  // [F, codebook_size + 1]
  std::vector<float> tower;      // [F, K - 1, codebook_size]
};

// Wall-clock split of generation, for `drama bench decode`. A replayed step (a CUDA graph) has
// no host-side boundary between backbone and tower: all of it counts as tower_s.
struct StepTiming {
  double backbone_s = 0, tower_s = 0, prefill_s = 0;
  int64_t frames = 0;
  uint64_t decode_weight_bytes = 0;  // weight bytes read by steps that made frames
};

class Drama3Model {
 public:
  Drama3Model(const Checkpoint& checkpoint, Backend& backend, ModelCapacity capacity = {});
  // Weights already resident on `backend` (the synthetic benchmark builds them there); `config`
  // and the memory the weights name must outlive the model.
  Drama3Model(const Drama3Config& config, ModelWeights resident, Backend& backend,
              ModelCapacity capacity = {});
  ~Drama3Model();
  const Drama3Config& config() const { return config_; }
  Backend& backend() { return backend_; }
  const ModelCapacity& capacity() const { return capacity_; }
  // Positions a branch's backbone cache holds (capacity().max_positions resolved).
  int64_t max_positions() const { return max_positions_; }

  // --- sessions (call from one thread) ---
  // Takes a free lane for a new session; it starts at the next step. Refuses (drama::Error) a
  // prompt longer than max_position_embeddings, an empty one, or a full model.
  uint64_t join(SessionSpec spec);
  // The session ends at the next step (StopReason::Cancelled), without disturbing the others.
  void cancel(uint64_t session);
  // A held session is not advanced (its consumer is behind); it resumes where it was.
  void hold(uint64_t session, bool held);
  // Advances every active, unheld session by one step; the events are in session order. The
  // vector is the model's own, valid until the next step: once its buffers have their sizes a
  // decode step allocates nothing on the host (tests/model/test_step_heap.cpp).
  const std::vector<StepEvent>& step();
  int64_t active_sessions() const;
  int64_t free_lanes() const { return capacity_.lanes - active_sessions(); }

  // One session alone, start to end (`drama say`, tests): join, then step until it ends.
  // cond: branch 0 prompt; uncond: the unconditional prompt when a voice guides (nullptr
  // otherwise). Runs only while no other session is active.
  GenerationResult generate(const Prompt& cond, const Prompt* uncond,
                            const GenerationOptions& options, const FrameCallback& on_frame,
                            const std::atomic<bool>* cancel = nullptr);

  // Logits that predict frame t of `codes` [frames, K] from the prompt and frames < t.
  TeacherForcedLogits teacher_forced(const Prompt& prompt, std::span<const int32_t> codes,
                                     int64_t frames);

  // TEST-ONLY (pruning contract): per backbone layer, ORIGINAL expert ids whose router logits are
  // set to -inf. Empty list = no masking.
  void set_masked_experts_for_test(const std::vector<std::vector<int32_t>>& per_layer);

  // Backbone rows run per branch (0 = conditional/only, 1 = unconditional) since construction.
  int64_t backbone_rows(int64_t branch) const { return backbone_rows_[branch]; }
  int64_t tower_rows(int64_t branch) const { return tower_rows_[branch]; }
  const StepCounters& counters() const { return counters_; }
  const StepTiming& timing() const { return timing_; }
  void reset_timing() { timing_ = StepTiming{}; }
  Workspace& workspace() { return ws_; }

 private:
  struct Lane;
  struct Plan;
  // The host buffers a step plans in, kept from step to step (frame_step.cpp).
  struct StepScratch;
  struct StepScratchDeleter {
    void operator()(StepScratch* s) const;
  };
  void check_prompt(const Prompt& p, const char* which) const;
  void finish(Lane& lane, StopReason stop, std::vector<StepEvent>& events,
              const std::string& error = {});
  Lane* find(uint64_t session);
  void run_backbone(const Plan& plan);
  void run_heads(const Plan& plan);

  Backend& backend_;
  const Drama3Config& config_;
  const ModelCapacity capacity_;
  const int64_t max_positions_;
  ModelWeights resident_;
  Workspace ws_;
  std::unique_ptr<Backbone> backbone_;
  std::unique_ptr<Tower> tower_;
  // Fixed at load: caches for two branches per lane, the step's device buffers.
  std::unique_ptr<KvPool> backbone_cache_, tower_cache_;
  std::unique_ptr<DeviceBuffer> plan_buf_, x_buf_, last_buf_, head_buf_, hnorm_buf_, logits_buf_,
      combined_buf_, tower_x_buf_, ids_buf_, codes_buf_, lane_codes_buf_;
  size_t plan_capacity_ = 0;
  std::vector<Lane> lanes_;
  uint64_t next_session_ = 1;
  int64_t backbone_rows_[2] = {0, 0};
  int64_t tower_rows_[2] = {0, 0};
  StepCounters counters_;
  StepTiming timing_;
  // Captured steps' keys begin with this model's number (models may share a backend).
  const uint64_t capture_id_;
  std::unique_ptr<StepScratch, StepScratchDeleter> scratch_;
};

// Copies the views of a checkpoint's weights to `backend` (zero-copy on the CPU).
ModelWeights make_resident(Backend& backend, const ModelWeights& host, const Drama3Config& config);

}  // namespace drama
