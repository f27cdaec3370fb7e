// The audio of one speech reply, frame by frame: the optional time stretch (`speed`), then the
// encoder of the response format. Whole and streamed replies push the same frames through the
// same steps, so they carry the same bytes (WAV/PCM differ only by the streamed WAV's header of
// unknown length; FLAC is whole only).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "audio/audio_io.h"
#include "audio/encode_stream.h"
#include "audio/time_stretch.h"

namespace drama::server {

class ReplyAudio {
 public:
  // `streamed`: bytes leave frame by frame (WAV gets the streaming header); otherwise WAV, PCM
  // and FLAC are written whole at the end as before, MP3 and Opus still frame by frame.
  ReplyAudio(AudioFormat format, int64_t sample_rate, double speed, bool streamed);

  // Appends the bytes that this frame completes (possibly none).
  void push(std::span<const float> frame, std::vector<uint8_t>& bytes);
  // Appends the rest of the reply.
  void finish(std::vector<uint8_t>& bytes);
  int64_t samples_out() const { return samples_out_; }

 private:
  void encode(std::span<const float> pcm, std::vector<uint8_t>& bytes);

  AudioFormat format_;
  int64_t sample_rate_;
  std::unique_ptr<TimeStretcher> stretch_;       // null at speed 1: samples pass untouched
  std::unique_ptr<AudioStreamEncoder> encoder_;  // null: a whole file at the end
  std::vector<float> whole_;
  std::vector<float> stretched_;
  int64_t samples_out_ = 0;
};

}  // namespace drama::server
