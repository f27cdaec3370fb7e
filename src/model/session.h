// A generation request as the model's batched step sees it (spec section 6): its prompts, its
// guidance and sampling parameters, its seed; and what a step reports back about it.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/guidance.h"
#include "model/prompt.h"

namespace drama {

struct GenerationOptions {
  uint64_t seed = 0;
  SamplingParams sampling;
  float gamma = 1.0f;
  CfgMode cfg = CfgMode::Paired;
  int64_t max_frames = 750;  // the caller derives it from max_duration_s * frame_rate
  // Benchmarks only (vLLM's ignore_eos): a frame whose codebook 0 is eos_code is reported as a
  // frame and generation goes on, so a session runs to max_frames whatever the model says.
  // Never set from a request; the frames after end of speech are not speech.
  bool ignore_eos = false;
};

enum class StopReason { Eos, MaxFrames, PositionLimit, Cancelled };

struct SessionSpec {
  Prompt cond;                   // branch 0 (the only one without guidance)
  std::optional<Prompt> uncond;  // branch 1: the unconditional prompt when a voice guides
  GenerationOptions options;
  const std::atomic<bool>* cancel = nullptr;  // polled at every step
};

// What one step did for one session: made a frame, or ended it (after its last frame, if any).
struct StepEvent {
  uint64_t session = 0;
  bool finished = false;
  int64_t frame = 0;           // a frame event: its index
  std::vector<int32_t> codes;  // a frame event: its K codes
  StopReason stop = StopReason::MaxFrames;
  std::string error;  // a finished event of a failed session (non-finite logits): the reason
};

// How many sessions the model serves at once, fixed at load: KV caches and workspaces are
// allocated for this many (no allocation and no address change afterwards).
struct ModelCapacity {
  int64_t lanes = 1;
  // Prompt rows prefilled per step, over all joining sessions (docs/model.md: sessions already
  // streaming keep getting a frame every step while a long prompt is prefilled).
  int64_t prefill_chunk = 128;
  // Positions each guidance branch's backbone cache holds (prompt and frames), like llama.cpp's
  // --ctx-size or vLLM's max_model_len: 0 means the config's max_position_embeddings, the most
  // it may be. A lane's cache memory is proportional to it, so many lanes of a long-context
  // model need a shorter one.
  int64_t max_positions = 0;
};

// Counters of the batched step since load.
struct StepCounters {
  int64_t steps = 0;
  int64_t backbone_rows = 0;  // rows through the backbone (decode + prefill)
  int64_t prefill_rows = 0;
  int64_t max_prefill_rows = 0;  // the most prompt rows one step carried
  int64_t frames = 0;
  int64_t session_steps = 0;   // sum over steps of the sessions that made a frame in it
  int64_t replayed_steps = 0;  // steps replayed from captured work (a CUDA graph)
};

}  // namespace drama
