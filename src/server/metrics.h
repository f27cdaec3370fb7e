// GET /metrics: Prometheus text exposition of request outcomes, frames generated, time to first
// audio, real-time factor, queue depth, cancellations, and the batched step's lanes, rows per
// step and lane occupancy.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace drama::server {

class Metrics {
 public:
  // Outcomes: ok, cancelled, bad_request, not_found, busy, error, ... (one counter each).
  void count_request(const std::string& outcome);
  // One finished generation (streamed or whole, completed or cancelled).
  void record_generation(int64_t frames, double seconds_to_first_audio, double real_time_factor,
                         bool cancelled);
  // Point-in-time figures of the admission and the engine's batched step.
  struct Gauges {
    int queue_depth = 0;
    int lanes = 1;
    int lanes_in_use = 0;
    EngineStats engine;
  };
  std::string render(const Gauges& g) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, uint64_t> requests_;
  uint64_t frames_ = 0;
  uint64_t generations_ = 0;
  uint64_t cancellations_ = 0;
  std::vector<uint64_t> ttfa_buckets_ = std::vector<uint64_t>(kTtfaBounds.size(), 0);
  uint64_t ttfa_count_ = 0;
  double ttfa_sum_ = 0;
  uint64_t rtf_count_ = 0;
  double rtf_sum_ = 0;
  double rtf_last_ = 0;

  static inline const std::vector<double> kTtfaBounds = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
};

}  // namespace drama::server
