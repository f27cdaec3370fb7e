// Internal to Drama3Model (drama3_model.cpp, frame_step.cpp): one lane's session state and the
// host-side plan of one batched step.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "model/drama3_model.h"

namespace drama {

// One guidance branch of a session: its prompt rows flattened for chunked prefill, and how many
// positions its cache holds (prompt rows prefilled, then one per frame fed back).
struct LaneBranch {
  int64_t rows = 0;            // prompt rows
  int64_t filled = 0;          // positions in the cache
  std::vector<int32_t> ids;    // [rows, K]: a text row's token in column 0; a frame row's
                               // embedding-table ids k * (codebook_size + 1) + code
  std::vector<uint8_t> audio;  // [rows]: 1 for a frame row
  void load(const Prompt& p, const Drama3Config& c);
  bool prefilled() const { return filled >= rows; }
};

struct Drama3Model::Lane {
  bool used = false;
  uint64_t id = 0;
  SessionSpec spec;
  GuidancePair guide{false, 1.0f, CfgMode::Paired};
  LaneBranch br[2];
  int64_t frames = 0, frames_cap = 0;
  bool held = false, cancel_requested = false;
  bool prefilled() const {
    for (int64_t b = 0; b < guide.branches(); ++b)
      if (!br[b].prefilled()) return false;
    return true;
  }
};

// Upper bound of a step plan's bytes for L lanes, R backbone rows and K codebooks.
size_t step_plan_bytes(int64_t lanes, int64_t rows, int64_t codebooks);

}  // namespace drama
