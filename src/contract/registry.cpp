// The registry: every kernel of backend.h with its cases, tolerance reasoning and limit, and
// the planted controls (spec contract.md).
#include <algorithm>

#include "contract/contract.h"
#include "contract/kernels.h"

namespace drama::contract {

namespace {

using Builder = std::vector<KernelCase> (*)(uint64_t, Fault);

std::function<std::vector<KernelCase>(uint64_t)> cases_of(Builder b, Fault f = Fault::None) {
  return [b, f](uint64_t seed) { return b(seed, f); };
}

KernelSpec kernel(const char* name, const char* family, const char* why, Builder b, Limit limit) {
  return {name, family, why, cases_of(b), std::move(limit)};
}

// A planted fault of `kernel`'s builder; expect_gate names the gate it is planted for (0: any).
Control planted(const char* name, const char* kernel, Builder b, Fault f, int expect_gate = 0) {
  Control c;
  c.name = name;
  c.kernel = kernel;
  c.make_cases = cases_of(b, f);
  c.expect_gate = expect_gate;
  return c;
}

}  // namespace

Registry kernel_registry() {
  Registry r;
  r.kernels = {
      kernel("copy_2d", "copy", "exact: a copy (block, transpose, broadcast); gaps untouched",
             copy_2d_cases, copy_limit("copy_2d")),
      kernel("fill", "copy", "exact: one value stored; gaps untouched", fill_cases,
             copy_limit("fill")),
      kernel("copy_rows", "copy", "exact: row copies; rows not named untouched", copy_rows_cases,
             copy_limit("copy_rows")),
      kernel("gather_ids", "copy", "exact: integer gather plus offset", gather_ids_cases,
             copy_limit("gather_ids")),
      kernel("linear_nvfp4", "matmul", "gamma_{k+2} sum|x w| per element; NMSE 32 k u^2",
             linear_nvfp4_cases, linear_nvfp4_limit()),
      kernel("linear_bf16", "matmul", "gamma_{k+2} sum|x w| per element; NMSE 32 k u^2",
             linear_bf16_cases, linear_bf16_limit()),
      kernel("linears", "matmul", "each element linear's: gamma_{k+2} sum|x w|; NMSE 32 k u^2",
             linears_cases, linears_limit()),
      kernel("linear_add", "matmul", "(1 + u) linear's bound + u |y + x w^T| (the add's rounding)",
             linear_add_cases, linear_add_limit()),
      kernel("dequantize", "matmul", "exact: e2m1*e4m3 exact, one rounding by scale_2",
             dequantize_cases, dequantize_limit()),
      kernel("embed_sum", "transformer", "gamma_n sum|t| for n rows summed", embed_sum_cases,
             small_kernel_limit("embed_sum")),
      kernel("rms_norm", "transformer", "relative gamma_dim/2 + 6u", rms_norm_cases,
             elementwise_limit("rms_norm")),
      kernel("rope", "transformer", "8u (|x1|+|x2|) with accurately reduced angles", rope_cases,
             elementwise_limit("rope")),
      kernel("qk_norm_rope_cache", "transformer",
             "(8u + rho)(|a|+|b|) over the normed pair, rho = gamma_hd/2 + 6u; v copied exactly",
             qk_norm_rope_cache_cases, elementwise_limit("qk_norm_rope_cache")),
      kernel("attention", "transformer",
             "sum p|v| (2 max score error + (2L+8)u + gamma_L); scores gamma_{d+1}",
             attention_cases, attention_limit()),
      kernel("swiglu", "transformer", "8u relative; gate centred near 1", swiglu_cases,
             elementwise_limit("swiglu")),
      kernel("add", "transformer", "exact: one correctly rounded add", add_cases,
             elementwise_limit("add")),
      kernel("sigmoid", "transformer", "6u relative (exp 2u, add, divide)", sigmoid_cases,
             elementwise_limit("sigmoid")),
      kernel("route_topk", "moe", "ids exact; weights (n + k + 12)u relative", route_topk_cases,
             small_kernel_limit("route_topk")),
      kernel("moe_experts", "moe",
             "gate/up errors through SwiGLU and down, first order; NMSE 32 (H+I) u^2 + 2^-34",
             moe_experts_cases, moe_experts_limit()),
      kernel("expert_combine", "moe", "gamma_{2k+1} (|y| + sum|w e|)", expert_combine_cases,
             small_kernel_limit("expert_combine")),
      kernel("expert_sum", "moe", "gamma_{2k+1} sum|w e| (expert_combine from zero)",
             expert_sum_cases, small_kernel_limit("expert_sum")),
      kernel("expert_sum_add", "moe",
             "(1 + u) expert_sum's bound + u |y + sum| (the add's rounding)", expert_sum_add_cases,
             small_kernel_limit("expert_sum_add")),
      kernel("expert_sum_add_norm", "moe",
             "y as expert_sum_add; yn rms_norm's gamma_dim/2 + 6u plus y's error through the norm",
             expert_sum_add_norm_cases, small_kernel_limit("expert_sum_add_norm")),
      kernel("guidance_combine", "guidance", "4u (|u| + gamma (|c|+|u|)); copy rows exact",
             guidance_combine_cases, elementwise_limit("guidance_combine")),
      kernel("sample_rows", "sampling", "ids and flags exact against the float64 sampler",
             sample_rows_cases, sample_rows_limit()),
      kernel("non_finite_guard", "guard", "exact: flag and id 0 per non-finite row",
             non_finite_guard_cases, elementwise_limit("non_finite_guard")),
      kernel("conv1d", "codec", "gamma_{terms+1} (sum|w x| + |b|)", conv1d_cases, conv1d_limit()),
      kernel("conv_transpose1d", "codec", "gamma_{terms+1} (sum|w x| + |b|)",
             conv_transpose1d_cases, conv_transpose1d_limit()),
      kernel("elu", "codec", "4u alpha (x <= 0) + 2u |y|", elu_cases, elementwise_limit("elu")),
      kernel("gelu", "codec", "4u |x| + 4u |y| (1 + erf cancels for x < 0)", gelu_cases,
             elementwise_limit("gelu")),
      kernel("layer_norm", "codec", "(gamma_{2 dim} + 8u) |w| (|xhat| + 1) + 2u |b|",
             layer_norm_cases, elementwise_limit("layer_norm")),
      kernel("scale_rows", "codec", "exact: one correctly rounded multiply", scale_rows_cases,
             elementwise_limit("scale_rows")),
      kernel("vq_decode", "codec", "exact: a row copy", vq_decode_cases,
             small_kernel_limit("vq_decode")),
      kernel("vq_encode", "codec", "ids exact; near-ties 1e-3 apart in squared distance",
             vq_encode_cases, small_kernel_limit("vq_encode")),
  };
  // At least one planted control per registered kernel (a test checks), each imitating a
  // plausible bug of that kernel and red at the gate named last (gate 1: coverage, 2: accuracy,
  // 4: batch invariance); the exact copy of the reference must pass.
  r.controls = {
      planted("copy_2d ignoring src_col_stride", "copy_2d", copy_2d_cases,
              Fault::IgnoredColumnStride, 2),
      planted("fill leaving the last column", "fill", fill_cases, Fault::LastColumnLeft, 1),
      planted("copy_rows writing the wrong row", "copy_rows", copy_rows_cases,
              Fault::WrongDestinationRow, 1),
      planted("gather_ids dropping the offset", "gather_ids", gather_ids_cases,
              Fault::DroppedOffset, 2),
      planted("nvfp4 swapped nibbles", "linear_nvfp4", linear_nvfp4_cases, Fault::SwappedNibbles,
              2),
      planted("nvfp4 wrong scale block", "linear_nvfp4", linear_nvfp4_cases, Fault::WrongScaleBlock,
              2),
      planted("nvfp4 missing global scale", "linear_nvfp4", linear_nvfp4_cases,
              Fault::MissingGlobalScale, 2),
      planted("nvfp4 skipped tail block", "linear_nvfp4", linear_nvfp4_cases,
              Fault::SkippedTailBlock, 2),
      planted("fp16 accumulation", "linear_bf16", linear_bf16_cases, Fault::Fp16Accumulation),
      planted("batch-dependent reduction order", "linear_bf16", linear_bf16_cases,
              Fault::BatchDependentOrder, 4),
      planted("linears with the first product's weight for the second", "linears", linears_cases,
              Fault::NeighbourProductWeight, 2),
      planted("linear_add storing the product over the residual", "linear_add", linear_add_cases,
              Fault::ResidualLeftOut, 2),
      planted("dequantize with the neighbour's scale block", "dequantize", dequantize_cases,
              Fault::NeighbourScaleBlock, 2),
      planted("embed_sum missing the last id", "embed_sum", embed_sum_cases, Fault::MissingLastId,
              2),
      planted("unwritten output", "rms_norm", rms_norm_cases, Fault::Unwritten, 1),
      planted("wrong rotary pair", "rope", rope_cases, Fault::WrongRotaryPair, 2),
      planted("k cached before its rotary", "qk_norm_rope_cache", qk_norm_rope_cache_cases,
              Fault::CacheBeforeRotary, 2),
      planted("attention one position past the window", "attention", attention_cases,
              Fault::WindowPlusOne, 2),
      planted("attention reading a neighbour's cache", "attention", attention_cases,
              Fault::NeighbourCache, 2),
      planted("fp16 intermediates", "swiglu", swiglu_cases, Fault::Fp16Accumulation, 2),
      planted("add rounded toward zero", "add", add_cases, Fault::TruncatedAdd, 2),
      planted("sigmoid in float16", "sigmoid", sigmoid_cases, Fault::Fp16Intermediates, 2),
      planted("off-by-one top-k", "route_topk", route_topk_cases, Fault::OffByOneTopk, 2),
      planted("moe_experts routing a pair to its neighbour expert", "moe_experts",
              moe_experts_cases, Fault::NeighbourExpert, 2),
      planted("moe_experts order depending on rows sharing the expert", "moe_experts",
              moe_experts_cases, Fault::SharedExpertOrder, 4),
      planted("expert_combine with the next rank's weight", "expert_combine", expert_combine_cases,
              Fault::NeighbourRankWeight, 2),
      planted("expert_sum adding to what the output held", "expert_sum", expert_sum_cases,
              Fault::SumOnUnzeroedOutput, 2),
      planted("expert_sum_add storing the sum over the residual", "expert_sum_add",
              expert_sum_add_cases, Fault::ResidualLeftOut, 2),
      planted("expert_sum_add_norm normalising the residual before the add", "expert_sum_add_norm",
              expert_sum_add_norm_cases, Fault::NormBeforeAdd, 2),
      planted("guidance gamma on the wrong branch", "guidance_combine", guidance_combine_cases,
              Fault::GammaOnWrongBranch, 2),
      planted("sampling with an off-by-one uniform", "sample_rows", sample_rows_cases,
              Fault::OffByOneUniform, 2),
      planted("sampling ignoring top-p", "sample_rows", sample_rows_cases, Fault::IgnoredTopP, 2),
      planted("non-finite guard missing -inf", "non_finite_guard", non_finite_guard_cases,
              Fault::GuardMissesNegativeInf, 2),
      planted("conv1d with a shifted tap", "conv1d", conv1d_cases, Fault::ShiftedTap, 2),
      planted("conv_transpose1d dropping the last tap", "conv_transpose1d", conv_transpose1d_cases,
              Fault::DroppedLastTap, 2),
      planted("elu in float16", "elu", elu_cases, Fault::Fp16Intermediates, 2),
      planted("one wrong element in a million", "gelu", gelu_cases, Fault::OneWrongElement, 2),
      planted("layer_norm with the unbiased variance", "layer_norm", layer_norm_cases,
              Fault::UnbiasedVariance, 2),
      planted("scale_rows with a bfloat16 scale", "scale_rows", scale_rows_cases, Fault::Bf16Scale,
              2),
      planted("vq_decode reading the next row", "vq_decode", vq_decode_cases,
              Fault::NextCodebookRow, 2),
      planted("vq_encode by largest dot product", "vq_encode", vq_encode_cases,
              Fault::DotProductNearest, 2),
  };
  Control exact = planted("exact copy of the reference", "linear_nvfp4", linear_nvfp4_cases,
                          Fault::ExactReferenceCopy);
  exact.expect_pass = true;
  r.controls.push_back(std::move(exact));
  return r;
}

std::string backend_method(const std::string& kernel) {
  if (kernel == "linear_nvfp4" || kernel == "linear_bf16") return "linear";
  if (kernel == "non_finite_guard") return "sample_rows";  // the guard is part of sampling
  return kernel;
}

std::vector<std::string> covered_backend_methods() {
  std::vector<std::string> names;
  for (const KernelSpec& k : kernel_registry().kernels) {
    const std::string n = backend_method(k.name);
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  }
  return names;
}

}  // namespace drama::contract
