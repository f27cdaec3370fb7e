#include "server/metrics.h"

#include <cstdio>
#include <sstream>

namespace drama::server {

void Metrics::count_request(const std::string& outcome) {
  std::lock_guard lock(mutex_);
  ++requests_[outcome];
}

void Metrics::record_generation(int64_t frames, double ttfa, double rtf, bool cancelled) {
  std::lock_guard lock(mutex_);
  frames_ += uint64_t(frames);
  ++generations_;
  if (cancelled) ++cancellations_;
  if (frames > 0) {
    ++ttfa_count_;
    ttfa_sum_ += ttfa;
    for (size_t i = 0; i < kTtfaBounds.size(); ++i) {
      if (ttfa <= kTtfaBounds[i]) ++ttfa_buckets_[i];
    }
    ++rtf_count_;
    rtf_sum_ += rtf;
    rtf_last_ = rtf;
  }
}

std::string Metrics::render(const Gauges& g) const {
  std::lock_guard lock(mutex_);
  std::ostringstream o;
  o.precision(9);
  o << "# HELP drama_requests_total HTTP requests by outcome.\n"
    << "# TYPE drama_requests_total counter\n";
  for (const auto& [outcome, n] : requests_) {
    o << "drama_requests_total{outcome=\"" << outcome << "\"} " << n << "\n";
  }
  o << "# HELP drama_frames_generated_total Audio frames generated.\n"
    << "# TYPE drama_frames_generated_total counter\n"
    << "drama_frames_generated_total " << frames_ << "\n"
    << "# HELP drama_generations_total Generations run (completed or cancelled).\n"
    << "# TYPE drama_generations_total counter\n"
    << "drama_generations_total " << generations_ << "\n"
    << "# HELP drama_cancellations_total Generations stopped because the client went away or the "
       "server stopped.\n"
    << "# TYPE drama_cancellations_total counter\n"
    << "drama_cancellations_total " << cancellations_ << "\n"
    << "# HELP drama_time_to_first_audio_seconds Seconds from admission to the first audio frame.\n"
    << "# TYPE drama_time_to_first_audio_seconds histogram\n";
  for (size_t i = 0; i < kTtfaBounds.size(); ++i) {
    o << "drama_time_to_first_audio_seconds_bucket{le=\"" << kTtfaBounds[i] << "\"} "
      << ttfa_buckets_[i] << "\n";
  }
  o << "drama_time_to_first_audio_seconds_bucket{le=\"+Inf\"} " << ttfa_count_ << "\n"
    << "drama_time_to_first_audio_seconds_sum " << ttfa_sum_ << "\n"
    << "drama_time_to_first_audio_seconds_count " << ttfa_count_ << "\n"
    << "# HELP drama_real_time_factor Generation seconds per audio second (below 1 is faster than "
       "real time).\n"
    << "# TYPE drama_real_time_factor summary\n"
    << "drama_real_time_factor_sum " << rtf_sum_ << "\n"
    << "drama_real_time_factor_count " << rtf_count_ << "\n"
    << "# HELP drama_real_time_factor_last Real-time factor of the last generation.\n"
    << "# TYPE drama_real_time_factor_last gauge\n"
    << "drama_real_time_factor_last " << rtf_last_ << "\n"
    << "# HELP drama_queue_depth Requests waiting for the engine.\n"
    << "# TYPE drama_queue_depth gauge\n"
    << "drama_queue_depth " << g.queue_depth << "\n"
    << "# HELP drama_busy 1 while a generation runs.\n"
    << "# TYPE drama_busy gauge\n"
    << "drama_busy " << (g.lanes_in_use > 0 ? 1 : 0) << "\n"
    << "# HELP drama_lanes Generations that can run together in one batched step (--lanes).\n"
    << "# TYPE drama_lanes gauge\n"
    << "drama_lanes " << g.lanes << "\n"
    << "# HELP drama_lanes_in_use Lanes held by requests now.\n"
    << "# TYPE drama_lanes_in_use gauge\n"
    << "drama_lanes_in_use " << g.lanes_in_use << "\n"
    << "# HELP drama_engine_steps_total Batched frame steps run.\n"
    << "# TYPE drama_engine_steps_total counter\n"
    << "drama_engine_steps_total " << g.engine.steps << "\n"
    << "# HELP drama_engine_rows_total Rows through the backbone over all steps (decode and "
       "prefill).\n"
    << "# TYPE drama_engine_rows_total counter\n"
    << "drama_engine_rows_total " << g.engine.backbone_rows << "\n"
    << "# HELP drama_engine_frames_total Frames made by the batched step.\n"
    << "# TYPE drama_engine_frames_total counter\n"
    << "drama_engine_frames_total " << g.engine.frames << "\n"
    << "# HELP drama_rows_per_step Backbone rows per step since start.\n"
    << "# TYPE drama_rows_per_step gauge\n"
    << "drama_rows_per_step "
    << (g.engine.steps ? double(g.engine.backbone_rows) / double(g.engine.steps) : 0.0) << "\n"
    << "# HELP drama_lane_occupancy Mean fraction of the lanes that made a frame per step since "
       "start.\n"
    << "# TYPE drama_lane_occupancy gauge\n"
    << "drama_lane_occupancy "
    << (g.engine.steps && g.lanes ? double(g.engine.frames) / double(g.engine.steps) / g.lanes
                                  : 0.0)
    << "\n"
    << "# HELP drama_codec_passes_total Codec decode passes run (each decodes the frames of "
       "every request that had one queued).\n"
    << "# TYPE drama_codec_passes_total counter\n"
    << "drama_codec_passes_total " << g.engine.codec_passes << "\n"
    << "# HELP drama_codec_frames_total Frames decoded by the codec's passes.\n"
    << "# TYPE drama_codec_frames_total counter\n"
    << "drama_codec_frames_total " << g.engine.codec_frames << "\n";
  return o.str();
}

}  // namespace drama::server
