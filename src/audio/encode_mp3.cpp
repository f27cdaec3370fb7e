// MP3 through libmp3lame (Debian's libmp3lame0), see encode_stream.h.
#include <lame/lame.h>

#include "audio/encode_stream.h"
#include "util/error.h"

namespace drama {

namespace {

class Mp3Encoder final : public AudioStreamEncoder {
 public:
  explicit Mp3Encoder(int64_t sample_rate) : lame_(lame_init()) {
    if (!lame_) throw Error("MP3 output: libmp3lame could not start.");
    lame_set_in_samplerate(lame_, static_cast<int>(sample_rate));
    lame_set_out_samplerate(lame_, static_cast<int>(sample_rate));
    lame_set_num_channels(lame_, 1);
    lame_set_mode(lame_, MONO);
    lame_set_VBR(lame_, vbr_off);
    lame_set_brate(lame_, 64);
    lame_set_quality(lame_, 5);
    lame_set_bWriteVbrTag(lame_, 0);  // a Xing tag would be rewritten at the start when done
    if (lame_init_params(lame_) < 0) {
      lame_close(lame_);
      throw Error("MP3 output: libmp3lame refused " + std::to_string(sample_rate) + " Hz mono.");
    }
  }
  ~Mp3Encoder() override { lame_close(lame_); }

  void push(std::span<const float> pcm, std::vector<uint8_t>& out) override {
    if (pcm.empty()) return;
    s16_.resize(pcm.size());
    for (size_t i = 0; i < pcm.size(); ++i) s16_[i] = float_to_s16(pcm[i]);
    const size_t base = out.size();
    const size_t room = pcm.size() * 5 / 4 + 7200;  // lame.h's worst case
    out.resize(base + room);
    const int n = lame_encode_buffer(lame_, s16_.data(), s16_.data(), static_cast<int>(pcm.size()),
                                     out.data() + base, static_cast<int>(room));
    if (n < 0) throw Error("MP3 output: libmp3lame failed (" + std::to_string(n) + ").");
    out.resize(base + static_cast<size_t>(n));
  }

  void finish(std::vector<uint8_t>& out) override {
    const size_t base = out.size();
    out.resize(base + 7200);
    const int n = lame_encode_flush(lame_, out.data() + base, 7200);
    if (n < 0) throw Error("MP3 output: libmp3lame failed to flush (" + std::to_string(n) + ").");
    out.resize(base + static_cast<size_t>(n));
  }

 private:
  lame_global_flags* lame_;
  std::vector<short> s16_;
};

}  // namespace

std::unique_ptr<AudioStreamEncoder> make_mp3_encoder(int64_t sample_rate) {
  return std::make_unique<Mp3Encoder>(sample_rate);
}

}  // namespace drama
