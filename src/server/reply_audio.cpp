#include "server/reply_audio.h"

namespace drama::server {

ReplyAudio::ReplyAudio(AudioFormat format, int64_t sample_rate, double speed, bool streamed)
    : format_(format), sample_rate_(sample_rate) {
  if (speed != 1.0) stretch_ = std::make_unique<TimeStretcher>(sample_rate, speed);
  if (streamed || format == AudioFormat::Mp3 || format == AudioFormat::Opus)
    encoder_ = make_stream_encoder(format, sample_rate);
}

void ReplyAudio::encode(std::span<const float> pcm, std::vector<uint8_t>& bytes) {
  samples_out_ += static_cast<int64_t>(pcm.size());
  if (encoder_)
    encoder_->push(pcm, bytes);
  else
    whole_.insert(whole_.end(), pcm.begin(), pcm.end());
}

void ReplyAudio::push(std::span<const float> frame, std::vector<uint8_t>& bytes) {
  if (!stretch_) return encode(frame, bytes);
  stretched_.clear();
  stretch_->push(frame, stretched_);
  encode(stretched_, bytes);
}

void ReplyAudio::finish(std::vector<uint8_t>& bytes) {
  if (stretch_) {
    stretched_.clear();
    stretch_->finish(stretched_);
    encode(stretched_, bytes);
  }
  if (encoder_) {
    encoder_->finish(bytes);
  } else {
    const std::vector<uint8_t> file = encode_audio(whole_, sample_rate_, format_);
    bytes.insert(bytes.end(), file.begin(), file.end());
  }
}

}  // namespace drama::server
