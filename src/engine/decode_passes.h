// Every request's codec frames decoded in shared passes (MimiDecodeBatch, codec/mimi.h).
//
// A request thread with a frame to decode queues it. If no pass is running, that thread runs one
// for every frame queued by then (its own and those other requests queued meanwhile), at most
// kMaxPass; otherwise it waits for a pass to take its frame. So the requests of one model step,
// whose frames arrive together, share a pass and the codec's weights are read once for all of
// them; a request alone decodes as before. A stream's samples equal its own decode's bit for bit
// whatever a pass holds (mimi_layers.h), so replies do not depend on the mix of requests.
// Passes hold `codec_mutex` (the codec backend's one stream and scratch, which voice encodes
// also use). A frame's codes are checked before it is queued, so a bad frame fails its own
// request alone; a pass holds frames of one codebook count. A pass that fails (the backend's
// error) fails every request in it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <span>
#include <vector>

#include "codec/mimi.h"

namespace drama {

class DecodePasses {
 public:
  static constexpr size_t kMaxPass = 64;

  DecodePasses(const MimiModel& codec, std::mutex& codec_mutex);
  // Decodes `stream`'s next frame into `pcm`; blocks until a pass has done it. Throws what the
  // frame's decode throws (drama::Error for bad codes; the stream is then unchanged).
  void decode(MimiDecoderStream& stream, std::span<const int32_t> codes, std::vector<float>& pcm);

  // Passes run and frames decoded since construction (for /metrics and tests).
  int64_t passes() const;
  int64_t frames() const;

 private:
  struct Job {
    MimiDecoderStream* stream;
    std::span<const int32_t> codes;
    std::vector<float>* pcm;
    bool done = false;
    std::exception_ptr error;
  };
  void run(std::span<Job* const> pass);

  const MimiModel& codec_;
  std::mutex& codec_mutex_;
  MimiDecodeBatch batch_;
  mutable std::mutex mutex_;
  std::condition_variable done_;
  std::vector<Job*> queue_;
  bool running_ = false;
  int64_t passes_ = 0, frames_ = 0;
};

}  // namespace drama
