// Streaming building blocks of the Mimi codec. Each layer keeps the left context it needs
// between calls, so feeding a signal in pieces gives the same outputs as feeding it whole
// (Hugging Face MimiModel semantics for causal convolutions):
// - StreamingConv1d: carries the last inputs of its padded input (zeros, or the first sample
//   replicated, before the first call); at the end of the signal it adds HF's extra right padding
//   so the last frame is complete.
// - StreamingConvTranspose1d: carries the previous input column(s) and recomputes their overlap,
//   so every emitted output is final; the kernel-stride tail that HF trims is never emitted.
// - MimiTransformer: causal sliding-window attention with a KV cache of the last window rows.
// Activations are device arrays: channel-major [channels, time] for convolutions, row-major
// [time, hidden] for the transformer.
#pragma once

#include <cstdint>
#include <vector>

#include "codec/codec_ops.h"
#include "codec/mimi_weights.h"
#include "format/mimi_config.h"

namespace drama {

class StreamingConv1d {
 public:
  StreamingConv1d(CodecOps& ops, const ConvWeights& w);
  // Consumes x [in, n]; writes y [out, m] into `y` and returns m. `last` ends the signal.
  int64_t forward(const float* x, int64_t n, bool last, DeviceArray& y);
  void reset();

 private:
  CodecOps& ops_;
  ConvWeights w_;
  int64_t effective_kernel_, padding_total_;
  DeviceArray history_;  // [in, kept_]
  int64_t kept_ = 0;
  bool started_ = false;
  DeviceArray padded_;
};

class StreamingConvTranspose1d {
 public:
  StreamingConvTranspose1d(CodecOps& ops, const ConvWeights& w);
  // Consumes x [in, n]; writes y [out, n * stride] and returns n * stride.
  int64_t forward(const float* x, int64_t n, DeviceArray& y);
  void reset();

 private:
  CodecOps& ops_;
  ConvWeights w_;
  int64_t context_;      // previous input columns whose outputs overlap the next ones
  DeviceArray padded_;   // [in, context_ + n]; the first context_ columns carry over
  DeviceArray history_;  // [in, context_]
  DeviceArray full_;
};

// A SEANet stack (encoder or decoder) run in pieces.
class SeanetStack {
 public:
  SeanetStack(CodecOps& ops, const std::vector<SeanetLayer>& layers);
  // x [channels, n] -> returns the output length; the output is in `out()`.
  int64_t forward(const float* x, int64_t channels, int64_t n, bool last);
  const float* out() const { return cur_->data(); }
  int64_t out_channels() const { return out_channels_; }
  void reset();

 private:
  struct Runtime {
    SeanetLayer::Kind kind;
    std::vector<StreamingConv1d> convs;                // Conv: 1; Resnet: 2
    std::vector<StreamingConvTranspose1d> transposed;  // ConvTranspose: 1
    int64_t out_channels = 0;
    int64_t hidden = 0;  // Resnet: channels between its two convolutions
  };
  CodecOps& ops_;
  std::vector<Runtime> layers_;
  DeviceArray a_, b_, t1_, t2_, t3_;
  DeviceArray* cur_ = &a_;
  int64_t out_channels_ = 0;
};

class MimiTransformer {
 public:
  MimiTransformer(CodecOps& ops, const MimiConfig& config,
                  const std::vector<TransformerLayerWeights>& layers);
  // In place on x [n, hidden]: appends n positions to the sequence.
  void forward(float* x, int64_t n);
  void reset();
  int64_t position() const { return position_; }

 private:
  void make_room(int64_t n);
  CodecOps& ops_;
  const MimiConfig& c_;
  const std::vector<TransformerLayerWeights>& layers_;
  int64_t q_dim_, kv_dim_;
  int64_t position_ = 0;  // absolute position of the next row
  int64_t cached_ = 0;    // rows held in the caches (their absolute positions end at position_)
  int64_t capacity_ = 0;
  std::vector<DeviceArray> k_cache_, v_cache_;
  DeviceArray shift_;  // scratch for moving the kept rows of a cache to its front
  DeviceArray h_, q_, attn_, proj_, mlp_, positions_abs_, positions_rel_;
};

}  // namespace drama
