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
//
// Every layer also runs for a batch: B streams' copies of one layer (the same weights, each with
// its own carried state) in one pass, their activations side by side along time ([channels,
// B * n], stream b's columns at b * n; rows b * n .. for the transformer). A convolution lays the
// streams' padded inputs out as segments of one signal and makes one backend call; the outputs
// that straddle two segments are computed and dropped. The backend kernels reduce every output
// element alone, in one order whatever the signal's length (backend.h, spec section 7), so a
// stream's outputs in a batch equal those of its own call bit for bit, and the one-stream
// forward() is the batch of one. What the batch saves is the weights read, and the calls made,
// once per pass instead of once per stream.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "codec/codec_ops.h"
#include "codec/mimi_weights.h"
#include "format/mimi_config.h"

namespace drama {

// A convolution's scratch for one pass (one stream or a batch).
struct ConvScratch {
  DeviceArray padded;  // the streams' padded inputs, side by side
  DeviceArray full;    // every output of the one backend call, straddling ones included
};

class StreamingConv1d {
 public:
  StreamingConv1d(CodecOps& ops, const ConvWeights& w);
  // Consumes x [in, n]; writes y [out, m] into `y` and returns m. `last` ends the signal.
  int64_t forward(const float* x, int64_t n, bool last, DeviceArray& y);
  // The batch: layers[b] consumes x's columns [b * n, (b + 1) * n) of x [in, B * n] and writes
  // y's [b * m, (b + 1) * m) of y [out, B * m]; returns m. Every stream must be at the same
  // carried length (a stream's first call and its later ones are, for the stride-1 convolutions
  // a decoder streams frame by frame through); n > 0 when B > 1.
  static int64_t forward_batch(std::span<StreamingConv1d* const> layers, const float* x, int64_t n,
                               bool last, ConvScratch& scratch, DeviceArray& y);
  void reset();

 private:
  int64_t head() const { return started_ ? kept_ : padding_total_; }
  CodecOps& ops_;
  ConvWeights w_;
  int64_t effective_kernel_, padding_total_;
  DeviceArray history_;  // [in, kept_]
  int64_t kept_ = 0;
  bool started_ = false;
  ConvScratch scratch_;
};

class StreamingConvTranspose1d {
 public:
  StreamingConvTranspose1d(CodecOps& ops, const ConvWeights& w);
  // Consumes x [in, n]; writes y [out, n * stride] and returns n * stride.
  int64_t forward(const float* x, int64_t n, DeviceArray& y);
  // The batch, laid out as StreamingConv1d::forward_batch's.
  static int64_t forward_batch(std::span<StreamingConvTranspose1d* const> layers, const float* x,
                               int64_t n, ConvScratch& scratch, DeviceArray& y);
  void reset();

 private:
  CodecOps& ops_;
  ConvWeights w_;
  int64_t context_;      // previous input columns whose outputs overlap the next ones
  DeviceArray history_;  // [in, context_]
  ConvScratch scratch_;
};

// A SEANet stack's activations for one pass.
struct SeanetScratch {
  ConvScratch conv;
  DeviceArray a, b, t1, t2, t3;
};

// A SEANet stack (encoder or decoder) run in pieces.
class SeanetStack {
 public:
  SeanetStack(CodecOps& ops, const std::vector<SeanetLayer>& layers);
  // x [channels, n] -> returns the output length; the output is in `out()`.
  int64_t forward(const float* x, int64_t channels, int64_t n, bool last);
  const float* out() const { return out_; }
  // The batch: stacks[b] consumes x's columns [b * n, (b + 1) * n) of x [channels, B * n];
  // returns the output length m per stream and points `out` at [out_channels, B * m] in scratch.
  static int64_t forward_batch(std::span<SeanetStack* const> stacks, const float* x,
                               int64_t channels, int64_t n, bool last, SeanetScratch& scratch,
                               const float*& out);
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
  SeanetScratch scratch_;
  const float* out_ = nullptr;
  int64_t out_channels_ = 0;
};

// A transformer's activations for one pass.
struct TransformerScratch {
  DeviceArray h, q, k, v, attn, proj, mlp, positions_abs, positions_rel;
};

class MimiTransformer {
 public:
  MimiTransformer(CodecOps& ops, const MimiConfig& config,
                  const std::vector<TransformerLayerWeights>& layers);
  // In place on x [n, hidden]: appends n positions to the sequence.
  void forward(float* x, int64_t n);
  // The batch: in place on x [B * n, hidden], rows [b * n, (b + 1) * n) appended to
  // layers[b]'s sequence. All must share one config and weights.
  static void forward_batch(std::span<MimiTransformer* const> layers, float* x, int64_t n,
                            TransformerScratch& scratch);
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
  TransformerScratch scratch_;
};

}  // namespace drama
