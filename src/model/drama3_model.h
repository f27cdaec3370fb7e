// The Drama-3 model on one backend (spec sections 1, 5, 6): prompt prefill, then one frame per
// step (backbone -> codebook 0 -> tower -> codebooks 1..K-1) with a KV cache per guidance branch.
// Written once against backend.h; every backend runs this same code.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "format/checkpoint.h"
#include "model/backbone.h"
#include "model/exec.h"
#include "model/frame_sampler.h"
#include "model/guidance.h"
#include "model/prompt.h"
#include "model/tower.h"

namespace drama {

struct GenerationOptions {
  uint64_t seed = 0;
  SamplingParams sampling;
  float gamma = 1.0f;
  CfgMode cfg = CfgMode::Paired;
  int64_t max_frames = 750;  // the caller derives it from max_duration_s * frame_rate
};

enum class StopReason { Eos, MaxFrames, PositionLimit, Cancelled };

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

// Wall-clock split of generation, for `drama bench decode`.
struct StepTiming {
  double backbone_s = 0, tower_s = 0, prefill_s = 0;
  int64_t frames = 0;
  uint64_t decode_weight_bytes = 0;  // weight bytes read by the per-frame steps (not prefill)
};

class Drama3Model {
 public:
  Drama3Model(const Checkpoint& checkpoint, Backend& backend);
  ~Drama3Model();
  const Drama3Config& config() const { return config_; }
  Backend& backend() { return backend_; }

  // cond: branch 0 prompt (the only one without a voice); uncond: the unconditional prompt when a
  // voice guides (nullptr otherwise). Refuses a prompt longer than max_position_embeddings.
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
  const StepTiming& timing() const { return timing_; }
  void reset_timing() { timing_ = StepTiming{}; }
  Exec& exec() { return exec_; }

 private:
  struct Branch;
  void check_prompt(const Prompt& p, const char* which) const;
  void tower_frame(const GuidancePair& guide, std::vector<Branch>& branches, const float* hnorm,
                   const FrameSampler& sampler, int64_t frame, std::vector<int32_t>& codes);
  float* scratch(size_t which, size_t floats);

  Backend& backend_;
  const Drama3Config& config_;
  ModelWeights resident_;
  Exec exec_;
  std::unique_ptr<Backbone> backbone_;
  std::unique_ptr<Tower> tower_;
  std::vector<std::unique_ptr<DeviceBuffer>> scratch_;
  int64_t backbone_rows_[2] = {0, 0};
  int64_t tower_rows_[2] = {0, 0};
  StepTiming timing_;
};

// Copies the views of a checkpoint's weights to `backend` (zero-copy on the CPU).
ModelWeights make_resident(Backend& backend, const ModelWeights& host, const Drama3Config& config);

}  // namespace drama
