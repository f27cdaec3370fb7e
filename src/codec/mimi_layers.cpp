#include "codec/mimi_layers.h"

#include <algorithm>

#include "util/error.h"

namespace drama {

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
  Backend& b = ops_.backend();
  const int64_t in = w_.in, s = w_.stride;
  const int64_t head = started_ ? kept_ : padding_total_;
  const int64_t len = head + n;
  int64_t extra = 0;  // HF `_get_extra_padding_for_conv1d`: complete the last frame
  if (last) {
    extra =
        len < effective_kernel_ ? effective_kernel_ - len : (s - (len - effective_kernel_) % s) % s;
  }
  const int64_t total = len + extra;
  float* padded = padded_.ensure(b, in * total);
  if (!started_) {
    if (n == 0) return 0;
    if (w_.replicate)
      ops_.replicate_column(padded, total, 0, head, x, n, 0, in);
    else
      ops_.fill(padded, total, in, head, 0.0f);
    started_ = true;
  } else {
    ops_.copy_block(padded, total, history_.data(), kept_, in, kept_);
  }
  ops_.copy_block(padded + head, total, x, n, in, n);
  if (extra > 0) {
    if (w_.replicate && len > 0)
      ops_.replicate_column(padded, total, len, extra, padded, total, len - 1, in);
    else
      ops_.fill(padded + len, total, in, extra, 0.0f);
  }
  const int64_t m = total >= effective_kernel_ ? (total - effective_kernel_) / s + 1 : 0;
  if (m > 0) {
    float* out = y.ensure(b, w_.out * m);
    b.conv1d(padded, in, total, w_.weight, w_.bias, w_.out, w_.kernel, s, w_.dilation, w_.groups,
             out, m);
  }
  // Keep what the next output still needs: everything from the next output's first input.
  kept_ = total - m * s;
  float* hist = history_.ensure(b, in * std::max<int64_t>(kept_, 1));
  ops_.copy_block(hist, kept_, padded + m * s, total, in, kept_);
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
  if (n == 0) return 0;
  Backend& b = ops_.backend();
  const int64_t in = w_.in, s = w_.stride, len = context_ + n;
  float* padded = padded_.ensure(b, in * len);
  ops_.copy_block(padded, len, history_.data(), context_, in, context_);
  ops_.copy_block(padded + context_, len, x, n, in, n);
  const int64_t full_len = (len - 1) * s + w_.kernel;
  float* full = full_.ensure(b, w_.out * full_len);
  b.conv_transpose1d(padded, in, len, w_.weight, w_.bias, w_.out, w_.kernel, s, w_.groups, full);
  // Outputs [context*s, (context+n)*s) have every contribution they will ever get.
  float* out = y.ensure(b, w_.out * n * s);
  ops_.copy_block(out, n * s, full + context_ * s, full_len, w_.out, n * s);
  ops_.copy_block(history_.data(), context_, padded + n, len, in, context_);
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
  Backend& b = ops_.backend();
  const float* in = x;
  DeviceArray* next = &a_;
  for (Runtime& r : layers_) {
    switch (r.kind) {
      case SeanetLayer::Kind::Elu:
        b.elu(in, channels * n, 1.0f, next->ensure(b, channels * n));
        break;
      case SeanetLayer::Kind::Conv:
        n = r.convs[0].forward(in, n, last, *next);
        break;
      case SeanetLayer::Kind::ConvTranspose:
        n = r.transposed[0].forward(in, n, *next);
        break;
      case SeanetLayer::Kind::Resnet: {
        // HF MimiResnetBlock: x + conv_k1(elu(conv_k(elu(x)))), identity shortcut.
        b.elu(in, channels * n, 1.0f, t1_.ensure(b, channels * n));
        const int64_t m1 = r.convs[0].forward(t1_.data(), n, last, t2_);
        b.elu(t2_.data(), r.hidden * m1, 1.0f, t3_.ensure(b, r.hidden * m1));
        const int64_t m2 = r.convs[1].forward(t3_.data(), m1, last, *next);
        if (m2 != n) throw Error("Mimi residual block changed the signal length.");
        b.add(in, channels * n, next->data());
        break;
      }
    }
    if (r.out_channels) channels = r.out_channels;
    in = next->data();
    cur_ = next;
    next = (next == &a_) ? &b_ : &a_;
  }
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
  if (n <= 0 || layers_.empty()) {
    position_ += std::max<int64_t>(n, 0);
    return;
  }
  Backend& b = ops_.backend();
  make_room(n);
  const int64_t d = c_.hidden_size, inter = c_.intermediate_size;
  std::vector<int32_t> abs(static_cast<size_t>(n)), rel(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    abs[i] = static_cast<int32_t>(position_ + i);
    rel[i] = static_cast<int32_t>(cached_ + i);
  }
  auto* pos_abs = reinterpret_cast<int32_t*>(positions_abs_.ensure(b, n));
  auto* pos_rel = reinterpret_cast<int32_t*>(positions_rel_.ensure(b, n));
  b.upload(pos_abs, abs.data(), abs.size() * sizeof(int32_t));
  b.upload(pos_rel, rel.data(), rel.size() * sizeof(int32_t));
  float* h = h_.ensure(b, n * d);
  float* q = q_.ensure(b, n * q_dim_);
  float* attn = attn_.ensure(b, n * q_dim_);
  float* proj = proj_.ensure(b, n * d);
  float* mlp = mlp_.ensure(b, 2 * n * inter);
  const float eps = static_cast<float>(c_.norm_eps);
  const float theta = static_cast<float>(c_.rope_theta);
  for (size_t l = 0; l < layers_.size(); ++l) {
    const TransformerLayerWeights& w = layers_[l];
    float* k_slot = k_cache_[l].data() + cached_ * kv_dim_;
    float* v_slot = v_cache_[l].data() + cached_ * kv_dim_;
    // Attention block: x += attn_scale * o(attention(rope(q), rope(k), v)) of layer_norm(x).
    b.layer_norm(x, w.input_norm_w, w.input_norm_b, n, d, eps, h);
    ops_.linear_f32(w.q, q_dim_, d, h, n, q);
    ops_.linear_f32(w.k, kv_dim_, d, h, n, k_slot);
    ops_.linear_f32(w.v, kv_dim_, d, h, n, v_slot);
    b.rope(q, n, c_.num_attention_heads, c_.head_dim, pos_abs, theta);
    b.rope(k_slot, n, c_.num_key_value_heads, c_.head_dim, pos_abs, theta);
    b.attention(q, n, pos_rel, nullptr, k_cache_[l].data(), v_cache_[l].data(),
                c_.num_attention_heads, c_.num_key_value_heads, c_.head_dim, c_.sliding_window,
                attn);
    ops_.linear_f32(w.o, d, q_dim_, attn, n, proj);
    b.scale_rows(proj, w.attn_scale, n, d, h);
    b.add(h, n * d, x);
    // MLP block: x += mlp_scale * fc2(gelu(fc1(layer_norm(x)))).
    b.layer_norm(x, w.post_norm_w, w.post_norm_b, n, d, eps, h);
    ops_.linear_f32(w.fc1, inter, d, h, n, mlp);
    b.gelu(mlp, n * inter, mlp + n * inter);
    ops_.linear_f32(w.fc2, d, inter, mlp + n * inter, n, proj);
    b.scale_rows(proj, w.mlp_scale, n, d, h);
    b.add(h, n * d, x);
  }
  cached_ += n;
  position_ += n;
}

}  // namespace drama
