#include "codec/mimi_layers.h"

#include <algorithm>
#include <string>

#include "util/error.h"

namespace drama {

namespace {
// A batch makes one backend call for a convolution only where each stream's output has at least
// this many steps. Below it (a frame's first layers: 2 to 16 steps) the streams are called one by
// one: there the one-stream shapes have kernels of their own (output channels on the CPU's vector
// lanes for a frame's 2 steps, the short transposed convolution), and one call over all the
// segments would spend most of its lanes on the outputs that straddle two of them (measured on
// the CPU with drama-mini's codec: 1.0 ms a stream-frame alone, 1.1-1.4 ms in passes of 2-8
// streams when every layer was one call). Either way gives the same bytes.
constexpr int64_t kBatchColumns = 64;
}  // namespace

// ---------------------------------------------------------------------------------------------
StreamingConv1d::StreamingConv1d(CodecOps& ops, const ConvWeights& w) : ops_(ops), w_(w) {
  effective_kernel_ = (w.kernel - 1) * w.dilation + 1;
  padding_total_ = effective_kernel_ - w.stride;  // HF: kernel_size_effective - stride
  if (padding_total_ < 0) throw Error("Mimi convolution has a stride larger than its kernel.");
}

void StreamingConv1d::reset() {
  started_ = false;
  kept_ = 0;
}

int64_t StreamingConv1d::forward(const float* x, int64_t n, bool last, DeviceArray& y) {
  StreamingConv1d* self = this;
  return forward_batch({&self, 1}, x, n, last, scratch_, y);
}

int64_t StreamingConv1d::forward_batch(std::span<StreamingConv1d* const> layers, const float* x,
                                       int64_t n, bool last, ConvScratch& scratch, DeviceArray& y) {
  const StreamingConv1d& l0 = *layers[0];
  CodecOps& ops = l0.ops_;
  Backend& b = ops.backend();
  const ConvWeights& w = l0.w_;
  const int64_t streams = static_cast<int64_t>(layers.size());
  const int64_t in = w.in, s = w.stride, kernel = l0.effective_kernel_;
  const int64_t head = l0.head();
  for (const StreamingConv1d* l : layers)
    if (l->head() != head)
      throw Error("Mimi convolution batch: streams at different carried lengths (" +
                  std::to_string(head) + ", " + std::to_string(l->head()) + ").");
  if (n == 0 && streams > 1) throw Error("Mimi convolution batch: an empty input.");
  const int64_t len = head + n;
  int64_t extra = 0;  // HF `_get_extra_padding_for_conv1d`: complete the last frame
  if (last) extra = len < kernel ? kernel - len : (s - (len - kernel) % s) % s;
  const int64_t total = len + extra;
  const int64_t m = total >= kernel ? (total - kernel) / s + 1 : 0;
  const int64_t kept = total - m * s;  // what the next output still needs, from its first input
  float* out = m > 0 ? y.ensure(b, w.out * m * streams) : nullptr;
  // Each stream's padded input is a segment of `seg` columns (a whole number of strides, so its
  // outputs start on a segment's output grid); the last needs only its own `total`.
  const int64_t seg = (total + s - 1) / s * s;
  const int64_t group = streams > 1 && m < kBatchColumns ? 1 : streams;
  for (int64_t g0 = 0; g0 < streams; g0 += group) {
    const int64_t width = (group - 1) * seg + total;
    float* padded = scratch.padded.ensure(b, in * width);
    for (int64_t i = 0; i < group; ++i) {
      StreamingConv1d& l = *layers[g0 + i];
      float* p = padded + i * seg;
      const float* xi = x + (g0 + i) * n;
      const int64_t xs = streams * n;
      if (!l.started_) {
        if (n == 0) return 0;
        if (w.replicate)
          ops.replicate_column(p, width, 0, head, xi, xs, 0, in);
        else
          ops.fill(p, width, in, head, 0.0f);
      } else {
        ops.copy_block(p, width, l.history_.data(), l.kept_, in, l.kept_);
      }
      ops.copy_block(p + head, width, xi, xs, in, n);
      if (extra > 0) {
        if (w.replicate && len > 0)
          ops.replicate_column(p, width, len, extra, p, width, len - 1, in);
        else
          ops.fill(p + len, width, in, extra, 0.0f);
      }
      if (i + 1 < group && seg > total) ops.fill(p + total, width, in, seg - total, 0.0f);
    }
    if (m > 0) {
      const int64_t all = (width - kernel) / s + 1;  // = (group - 1) * seg / s + m
      float* full = streams == 1 ? out : scratch.full.ensure(b, w.out * all);
      b.conv1d(padded, in, width, w.weight, w.bias, w.out, w.kernel, s, w.dilation, w.groups, full,
               all);
      if (streams > 1)
        for (int64_t i = 0; i < group; ++i)
          ops.copy_block(out + (g0 + i) * m, streams * m, full + i * seg / s, all, w.out, m);
    }
    for (int64_t i = 0; i < group; ++i) {
      StreamingConv1d& l = *layers[g0 + i];
      l.started_ = true;
      l.kept_ = kept;
      float* hist = l.history_.ensure(b, in * std::max<int64_t>(kept, 1));
      ops.copy_block(hist, kept, padded + i * seg + m * s, width, in, kept);
    }
  }
  return m;
}

// ---------------------------------------------------------------------------------------------
StreamingConvTranspose1d::StreamingConvTranspose1d(CodecOps& ops, const ConvWeights& w)
    : ops_(ops), w_(w) {
  if (w.kernel < w.stride)
    throw Error("Mimi transposed convolution has a stride larger than its kernel.");
  context_ = (w.kernel - w.stride + w.stride - 1) / w.stride;
  reset();
}

void StreamingConvTranspose1d::reset() {
  float* hist = history_.ensure(ops_.backend(), w_.in * std::max<int64_t>(context_, 1));
  ops_.fill(hist, context_, w_.in, context_, 0.0f);
}

int64_t StreamingConvTranspose1d::forward(const float* x, int64_t n, DeviceArray& y) {
  StreamingConvTranspose1d* self = this;
  return forward_batch({&self, 1}, x, n, scratch_, y);
}

int64_t StreamingConvTranspose1d::forward_batch(std::span<StreamingConvTranspose1d* const> layers,
                                                const float* x, int64_t n, ConvScratch& scratch,
                                                DeviceArray& y) {
  if (n == 0) return 0;
  const StreamingConvTranspose1d& l0 = *layers[0];
  CodecOps& ops = l0.ops_;
  Backend& b = ops.backend();
  const ConvWeights& w = l0.w_;
  const int64_t streams = static_cast<int64_t>(layers.size());
  const int64_t in = w.in, s = w.stride, context = l0.context_, len = context + n;
  // Stream i's input (its carried columns, then x's) is columns [i * len, (i + 1) * len). An
  // input column t reaches outputs [t * s, t * s + kernel), and context * s + s >= kernel, so the
  // outputs a stream keeps, [(i * len + context) * s, (i * len + len) * s), take nothing from
  // another stream's columns.
  float* out = y.ensure(b, w.out * n * s * streams);
  const int64_t group = streams > 1 && n * s < kBatchColumns ? 1 : streams;
  for (int64_t g0 = 0; g0 < streams; g0 += group) {
    const int64_t width = group * len;
    float* padded = scratch.padded.ensure(b, in * width);
    for (int64_t i = 0; i < group; ++i) {
      ops.copy_block(padded + i * len, width, layers[g0 + i]->history_.data(), context, in,
                     context);
      ops.copy_block(padded + i * len + context, width, x + (g0 + i) * n, streams * n, in, n);
    }
    const int64_t full_len = (width - 1) * s + w.kernel;
    float* full = scratch.full.ensure(b, w.out * full_len);
    b.conv_transpose1d(padded, in, width, w.weight, w.bias, w.out, w.kernel, s, w.groups, full);
    // Outputs [context*s, (context+n)*s) of a stream have every contribution they will ever get.
    for (int64_t i = 0; i < group; ++i) {
      ops.copy_block(out + (g0 + i) * n * s, streams * n * s, full + (i * len + context) * s,
                     full_len, w.out, n * s);
      ops.copy_block(layers[g0 + i]->history_.data(), context, padded + i * len + n, width, in,
                     context);
    }
  }
  return n * s;
}

// ---------------------------------------------------------------------------------------------
SeanetStack::SeanetStack(CodecOps& ops, const std::vector<SeanetLayer>& layers) : ops_(ops) {
  int64_t channels = 0;
  for (const SeanetLayer& l : layers) {
    Runtime r;
    r.kind = l.kind;
    switch (l.kind) {
      case SeanetLayer::Kind::Conv:
        r.convs.emplace_back(ops, l.conv);
        channels = l.conv.out;
        break;
      case SeanetLayer::Kind::ConvTranspose:
        r.transposed.emplace_back(ops, l.conv);
        channels = l.conv.out;
        break;
      case SeanetLayer::Kind::Resnet:
        r.convs.emplace_back(ops, l.block1);
        r.convs.emplace_back(ops, l.block3);
        r.hidden = l.block1.out;
        break;
      case SeanetLayer::Kind::Elu:
        break;
    }
    r.out_channels = channels;
    layers_.push_back(std::move(r));
  }
  out_channels_ = channels;
}

void SeanetStack::reset() {
  for (Runtime& r : layers_) {
    for (auto& c : r.convs) c.reset();
    for (auto& t : r.transposed) t.reset();
  }
}

int64_t SeanetStack::forward(const float* x, int64_t channels, int64_t n, bool last) {
  SeanetStack* self = this;
  return forward_batch({&self, 1}, x, channels, n, last, scratch_, out_);
}

int64_t SeanetStack::forward_batch(std::span<SeanetStack* const> stacks, const float* x,
                                   int64_t channels, int64_t n, bool last, SeanetScratch& scratch,
                                   const float*& out) {
  Backend& b = stacks[0]->ops_.backend();
  const int64_t streams = static_cast<int64_t>(stacks.size());
  std::vector<StreamingConv1d*> convs(stacks.size());
  std::vector<StreamingConvTranspose1d*> transposed(stacks.size());
  auto conv = [&](size_t layer, size_t which, const float* in, int64_t len, DeviceArray& y) {
    for (size_t i = 0; i < stacks.size(); ++i) convs[i] = &stacks[i]->layers_[layer].convs[which];
    return StreamingConv1d::forward_batch(convs, in, len, last, scratch.conv, y);
  };
  const float* in = x;
  DeviceArray* next = &scratch.a;
  const std::vector<Runtime>& layers = stacks[0]->layers_;
  for (size_t li = 0; li < layers.size(); ++li) {
    const Runtime& r = layers[li];
    const int64_t width = streams * n;
    switch (r.kind) {
      case SeanetLayer::Kind::Elu:
        b.elu(in, channels * width, 1.0f, next->ensure(b, channels * width));
        break;
      case SeanetLayer::Kind::Conv:
        n = conv(li, 0, in, n, *next);
        break;
      case SeanetLayer::Kind::ConvTranspose:
        for (size_t i = 0; i < stacks.size(); ++i)
          transposed[i] = &stacks[i]->layers_[li].transposed[0];
        n = StreamingConvTranspose1d::forward_batch(transposed, in, n, scratch.conv, *next);
        break;
      case SeanetLayer::Kind::Resnet: {
        // HF MimiResnetBlock: x + conv_k1(elu(conv_k(elu(x)))), identity shortcut.
        b.elu(in, channels * width, 1.0f, scratch.t1.ensure(b, channels * width));
        const int64_t m1 = conv(li, 0, scratch.t1.data(), n, scratch.t2);
        b.elu(scratch.t2.data(), r.hidden * m1 * streams, 1.0f,
              scratch.t3.ensure(b, r.hidden * m1 * streams));
        const int64_t m2 = conv(li, 1, scratch.t3.data(), m1, *next);
        if (m2 != n) throw Error("Mimi residual block changed the signal length.");
        b.add(in, channels * width, next->data());
        break;
      }
    }
    if (r.out_channels) channels = r.out_channels;
    in = next->data();
    next = (next == &scratch.a) ? &scratch.b : &scratch.a;
  }
  out = in;
  return n;
}

// ---------------------------------------------------------------------------------------------
MimiTransformer::MimiTransformer(CodecOps& ops, const MimiConfig& config,
                                 const std::vector<TransformerLayerWeights>& layers)
    : ops_(ops), c_(config), layers_(layers) {
  q_dim_ = c_.num_attention_heads * c_.head_dim;
  kv_dim_ = c_.num_key_value_heads * c_.head_dim;
  k_cache_.resize(layers.size());
  v_cache_.resize(layers.size());
}

void MimiTransformer::reset() {
  position_ = 0;
  cached_ = 0;
}

void MimiTransformer::make_room(int64_t n) {
  if (cached_ + n <= capacity_) return;
  // Only the last window-1 rows can still be attended to by the next rows.
  const int64_t keep = std::min<int64_t>(cached_, c_.sliding_window - 1);
  Backend& b = ops_.backend();
  if (keep + n > capacity_) {
    const int64_t capacity = keep + n + 2 * c_.sliding_window;
    for (size_t l = 0; l < layers_.size(); ++l) {
      for (std::vector<DeviceArray>* cache : {&k_cache_, &v_cache_}) {
        DeviceArray grown;
        float* dst = grown.ensure(b, capacity * kv_dim_);
        if (keep > 0)
          ops_.copy_block(dst, kv_dim_, (*cache)[l].data() + (cached_ - keep) * kv_dim_, kv_dim_,
                          keep, kv_dim_);
        (*cache)[l] = std::move(grown);
      }
    }
    capacity_ = capacity;
  } else {
    // The kept rows move to the front through a scratch array (device copies do not overlap).
    float* tmp = shift_.ensure(b, keep * kv_dim_);
    for (size_t l = 0; l < layers_.size(); ++l) {
      for (std::vector<DeviceArray>* cache : {&k_cache_, &v_cache_}) {
        float* base = (*cache)[l].data();
        ops_.copy_block(tmp, kv_dim_, base + (cached_ - keep) * kv_dim_, kv_dim_, keep, kv_dim_);
        ops_.copy_block(base, kv_dim_, tmp, kv_dim_, keep, kv_dim_);
      }
    }
  }
  cached_ = keep;
}

void MimiTransformer::forward(float* x, int64_t n) {
  MimiTransformer* self = this;
  forward_batch({&self, 1}, x, n, scratch_);
}

void MimiTransformer::forward_batch(std::span<MimiTransformer* const> layers, float* x, int64_t n,
                                    TransformerScratch& scratch) {
  MimiTransformer& t0 = *layers[0];
  if (n <= 0 || t0.layers_.empty()) {
    for (MimiTransformer* t : layers) t->position_ += std::max<int64_t>(n, 0);
    return;
  }
  CodecOps& ops = t0.ops_;
  Backend& b = ops.backend();
  const MimiConfig& c = t0.c_;
  const int64_t streams = static_cast<int64_t>(layers.size()), rows = streams * n;
  const int64_t d = c.hidden_size, inter = c.intermediate_size;
  const int64_t q_dim = t0.q_dim_, kv_dim = t0.kv_dim_;
  std::vector<int32_t> abs(static_cast<size_t>(rows)), rel(static_cast<size_t>(rows));
  for (int64_t i = 0; i < streams; ++i) {
    MimiTransformer& t = *layers[i];
    t.make_room(n);
    for (int64_t j = 0; j < n; ++j) {
      abs[i * n + j] = static_cast<int32_t>(t.position_ + j);
      rel[i * n + j] = static_cast<int32_t>(t.cached_ + j);
    }
  }
  auto* pos_abs = reinterpret_cast<int32_t*>(scratch.positions_abs.ensure(b, rows));
  auto* pos_rel = reinterpret_cast<int32_t*>(scratch.positions_rel.ensure(b, rows));
  b.upload(pos_abs, abs.data(), abs.size() * sizeof(int32_t));
  b.upload(pos_rel, rel.data(), rel.size() * sizeof(int32_t));
  float* h = scratch.h.ensure(b, rows * d);
  float* q = scratch.q.ensure(b, rows * q_dim);
  float* k = scratch.k.ensure(b, rows * kv_dim);
  float* v = scratch.v.ensure(b, rows * kv_dim);
  float* attn = scratch.attn.ensure(b, rows * q_dim);
  float* proj = scratch.proj.ensure(b, rows * d);
  float* mlp = scratch.mlp.ensure(b, 2 * rows * inter);
  const float eps = static_cast<float>(c.norm_eps);
  const float theta = static_cast<float>(c.rope_theta);
  for (size_t l = 0; l < t0.layers_.size(); ++l) {
    const TransformerLayerWeights& w = t0.layers_[l];
    // Attention block: x += attn_scale * o(attention(rope(q), rope(k), v)) of layer_norm(x).
    b.layer_norm(x, w.input_norm_w, w.input_norm_b, rows, d, eps, h);
    ops.linear_f32(w.q, q_dim, d, h, rows, q);
    ops.linear_f32(w.k, kv_dim, d, h, rows, k);
    ops.linear_f32(w.v, kv_dim, d, h, rows, v);
    b.rope(q, rows, c.num_attention_heads, c.head_dim, pos_abs, theta);
    b.rope(k, rows, c.num_key_value_heads, c.head_dim, pos_abs, theta);
    for (int64_t i = 0; i < streams; ++i) {
      MimiTransformer& t = *layers[i];
      float* k_cache = t.k_cache_[l].data();
      float* v_cache = t.v_cache_[l].data();
      ops.copy_block(k_cache + t.cached_ * kv_dim, kv_dim, k + i * n * kv_dim, kv_dim, n, kv_dim);
      ops.copy_block(v_cache + t.cached_ * kv_dim, kv_dim, v + i * n * kv_dim, kv_dim, n, kv_dim);
      b.attention(q + i * n * q_dim, n, pos_rel + i * n, nullptr, k_cache, v_cache,
                  c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.sliding_window,
                  attn + i * n * q_dim);
    }
    ops.linear_f32(w.o, d, q_dim, attn, rows, proj);
    b.scale_rows(proj, w.attn_scale, rows, d, h);
    b.add(h, rows * d, x);
    // MLP block: x += mlp_scale * fc2(gelu(fc1(layer_norm(x)))).
    b.layer_norm(x, w.post_norm_w, w.post_norm_b, rows, d, eps, h);
    ops.linear_f32(w.fc1, inter, d, h, rows, mlp);
    b.gelu(mlp, rows * inter, mlp + rows * inter);
    ops.linear_f32(w.fc2, d, inter, mlp + rows * inter, rows, proj);
    b.scale_rows(proj, w.mlp_scale, rows, d, h);
    b.add(h, rows * d, x);
  }
  for (MimiTransformer* t : layers) {
    t->cached_ += n;
    t->position_ += n;
  }
}

}  // namespace drama
