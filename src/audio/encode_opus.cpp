// Ogg Opus through libopusenc (Debian's libopusenc0, on libopus), see encode_stream.h.
#include <opus/opusenc.h>

#include <cstring>

#include "audio/encode_stream.h"
#include "util/error.h"

namespace drama {

namespace {

// Any fixed value: libopusenc would otherwise draw a random serial number per stream.
constexpr opus_int32 kSerialNumber = 0x64726d61;  // "drma"

class OpusEncoder final : public AudioStreamEncoder {
 public:
  explicit OpusEncoder(int64_t sample_rate) {
    comments_ = ope_comments_create();
    if (!comments_) throw Error("Opus output: libopusenc could not start.");
    OpusEncCallbacks callbacks{&OpusEncoder::write, &OpusEncoder::close};
    int err = 0;
    enc_ = ope_encoder_create_callbacks(&callbacks, this, comments_,
                                        static_cast<opus_int32>(sample_rate), 1, 0, &err);
    if (!enc_ || err != OPE_OK) {
      ope_comments_destroy(comments_);
      throw Error(std::string("Opus output: libopusenc refused (") + ope_strerror(err) + ").");
    }
    ope_encoder_ctl(enc_, OPE_SET_SERIALNO(kSerialNumber));
    ope_encoder_ctl(enc_, OPUS_SET_BITRATE(48000));
    // libopusenc holds this much audio (48 kHz units) before encoding it: 100 ms instead of its
    // 2 s default, so a stream starts early. Below one 80 ms generated frame (3840) its output
    // came to depend on how the samples were split into writes; at 100 ms it does not
    // (tests/audio/test_encode_stream.cpp).
    ope_encoder_ctl(enc_, OPE_SET_DECISION_DELAY(4800));
    // Pages are written at least every 100 ms of audio (48 kHz units), so a stream plays early.
    ope_encoder_ctl(enc_, OPE_SET_MUXING_DELAY(4800));
  }
  ~OpusEncoder() override {
    ope_encoder_destroy(enc_);
    ope_comments_destroy(comments_);
  }

  void push(std::span<const float> pcm, std::vector<uint8_t>& out) override {
    out_ = &out;
    if (!header_written_) {
      check(ope_encoder_flush_header(enc_), "header");
      header_written_ = true;
    }
    s16_.resize(pcm.size());
    for (size_t i = 0; i < pcm.size(); ++i) s16_[i] = float_to_s16(pcm[i]);
    if (!pcm.empty())
      check(ope_encoder_write(enc_, s16_.data(), static_cast<int>(pcm.size())), "write");
    out_ = nullptr;
  }

  void finish(std::vector<uint8_t>& out) override {
    push({}, out);
    out_ = &out;
    check(ope_encoder_drain(enc_), "drain");
    out_ = nullptr;
  }

 private:
  static int write(void* user, const unsigned char* ptr, opus_int32 len) {
    auto* self = static_cast<OpusEncoder*>(user);
    if (!self->out_) return 1;  // libopusenc only writes from inside push()/finish()
    self->out_->insert(self->out_->end(), ptr, ptr + len);
    return 0;
  }
  static int close(void*) { return 0; }
  static void check(int err, const char* what) {
    if (err != OPE_OK)
      throw Error(std::string("Opus output: libopusenc failed to ") + what + " (" +
                  ope_strerror(err) + ").");
  }

  OggOpusComments* comments_ = nullptr;
  OggOpusEnc* enc_ = nullptr;
  std::vector<uint8_t>* out_ = nullptr;
  std::vector<opus_int16> s16_;
  bool header_written_ = false;
};

}  // namespace

std::unique_ptr<AudioStreamEncoder> make_opus_encoder(int64_t sample_rate) {
  return std::make_unique<OpusEncoder>(sample_rate);
}

}  // namespace drama
