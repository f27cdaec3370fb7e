#include "audio/encode_stream.h"

#include "util/error.h"

namespace drama {

namespace {

// WAV (streaming header) and raw s16le: bytes follow samples one for one.
class LinearEncoder final : public AudioStreamEncoder {
 public:
  LinearEncoder(int64_t sample_rate, bool wav) : sample_rate_(sample_rate), header_(wav) {}
  void push(std::span<const float> pcm, std::vector<uint8_t>& out) override {
    if (header_) {
      const auto h = streaming_wav_header(sample_rate_);
      out.insert(out.end(), h.begin(), h.end());
      header_ = false;
    }
    append_s16le(pcm, out);
  }
  void finish(std::vector<uint8_t>& out) override { push({}, out); }

 private:
  int64_t sample_rate_;
  bool header_;
};

}  // namespace

std::unique_ptr<AudioStreamEncoder> make_stream_encoder(AudioFormat format, int64_t sample_rate) {
  switch (format) {
    case AudioFormat::Wav:
      return std::make_unique<LinearEncoder>(sample_rate, true);
    case AudioFormat::Pcm:
      return std::make_unique<LinearEncoder>(sample_rate, false);
    case AudioFormat::Mp3:
      return make_mp3_encoder(sample_rate);
    case AudioFormat::Opus:
      return make_opus_encoder(sample_rate);
    case AudioFormat::Flac:
      break;
  }
  throw UsageError("flac cannot be streamed; use wav, pcm, mp3 or opus.");
}

}  // namespace drama
