// The CPU registry: every kernel of backend.h with its cases, tolerance reasoning and limit, and
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

}  // namespace

Registry cpu_registry() {
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
      kernel("dequantize", "matmul", "exact: e2m1*e4m3 exact, one rounding by scale_2",
             dequantize_cases, dequantize_limit()),
      kernel("embed_sum", "transformer", "gamma_n sum|t| for n rows summed", embed_sum_cases,
             small_kernel_limit("embed_sum")),
      kernel("rms_norm", "transformer", "relative gamma_dim/2 + 6u", rms_norm_cases,
             elementwise_limit("rms_norm")),
      kernel("rope", "transformer", "8u (|x1|+|x2|) with accurately reduced angles", rope_cases,
             elementwise_limit("rope")),
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
  // plausible bug of that kernel; the exact copy of the reference must pass.
  r.controls = {
      {"copy_2d ignoring src_col_stride", "copy_2d", false,
       cases_of(copy_2d_cases, Fault::IgnoredColumnStride)},
      {"fill leaving the last column", "fill", false, cases_of(fill_cases, Fault::LastColumnLeft)},
      {"copy_rows writing the wrong row", "copy_rows", false,
       cases_of(copy_rows_cases, Fault::WrongDestinationRow)},
      {"gather_ids dropping the offset", "gather_ids", false,
       cases_of(gather_ids_cases, Fault::DroppedOffset)},
      {"nvfp4 swapped nibbles", "linear_nvfp4", false,
       cases_of(linear_nvfp4_cases, Fault::SwappedNibbles)},
      {"nvfp4 wrong scale block", "linear_nvfp4", false,
       cases_of(linear_nvfp4_cases, Fault::WrongScaleBlock)},
      {"nvfp4 missing global scale", "linear_nvfp4", false,
       cases_of(linear_nvfp4_cases, Fault::MissingGlobalScale)},
      {"nvfp4 skipped tail block", "linear_nvfp4", false,
       cases_of(linear_nvfp4_cases, Fault::SkippedTailBlock)},
      {"fp16 accumulation", "linear_bf16", false,
       cases_of(linear_bf16_cases, Fault::Fp16Accumulation)},
      {"batch-dependent reduction order", "linear_bf16", false,
       cases_of(linear_bf16_cases, Fault::BatchDependentOrder)},
      {"dequantize with the neighbour's scale block", "dequantize", false,
       cases_of(dequantize_cases, Fault::NeighbourScaleBlock)},
      {"embed_sum missing the last id", "embed_sum", false,
       cases_of(embed_sum_cases, Fault::MissingLastId)},
      {"unwritten output", "rms_norm", false, cases_of(rms_norm_cases, Fault::Unwritten)},
      {"wrong rotary pair", "rope", false, cases_of(rope_cases, Fault::WrongRotaryPair)},
      {"attention one position past the window", "attention", false,
       cases_of(attention_cases, Fault::WindowPlusOne)},
      {"attention reading a neighbour's cache", "attention", false,
       cases_of(attention_cases, Fault::NeighbourCache)},
      {"fp16 intermediates", "swiglu", false, cases_of(swiglu_cases, Fault::Fp16Accumulation)},
      {"add rounded toward zero", "add", false, cases_of(add_cases, Fault::TruncatedAdd)},
      {"sigmoid in float16", "sigmoid", false, cases_of(sigmoid_cases, Fault::Fp16Intermediates)},
      {"off-by-one top-k", "route_topk", false, cases_of(route_topk_cases, Fault::OffByOneTopk)},
      {"moe_experts routing a pair to its neighbour expert", "moe_experts", false,
       cases_of(moe_experts_cases, Fault::NeighbourExpert)},
      {"moe_experts order depending on rows sharing the expert", "moe_experts", false,
       cases_of(moe_experts_cases, Fault::SharedExpertOrder)},
      {"expert_combine with the next rank's weight", "expert_combine", false,
       cases_of(expert_combine_cases, Fault::NeighbourRankWeight)},
      {"guidance gamma on the wrong branch", "guidance_combine", false,
       cases_of(guidance_combine_cases, Fault::GammaOnWrongBranch)},
      {"sampling with an off-by-one uniform", "sample_rows", false,
       cases_of(sample_rows_cases, Fault::OffByOneUniform)},
      {"sampling ignoring top-p", "sample_rows", false,
       cases_of(sample_rows_cases, Fault::IgnoredTopP)},
      {"non-finite guard missing -inf", "non_finite_guard", false,
       cases_of(non_finite_guard_cases, Fault::GuardMissesNegativeInf)},
      {"conv1d with a shifted tap", "conv1d", false, cases_of(conv1d_cases, Fault::ShiftedTap)},
      {"conv_transpose1d dropping the last tap", "conv_transpose1d", false,
       cases_of(conv_transpose1d_cases, Fault::DroppedLastTap)},
      {"elu in float16", "elu", false, cases_of(elu_cases, Fault::Fp16Intermediates)},
      {"one wrong element in a million", "gelu", false,
       cases_of(gelu_cases, Fault::OneWrongElement)},
      {"layer_norm with the unbiased variance", "layer_norm", false,
       cases_of(layer_norm_cases, Fault::UnbiasedVariance)},
      {"scale_rows with a bfloat16 scale", "scale_rows", false,
       cases_of(scale_rows_cases, Fault::Bf16Scale)},
      {"vq_decode reading the next row", "vq_decode", false,
       cases_of(vq_decode_cases, Fault::NextCodebookRow)},
      {"vq_encode by largest dot product", "vq_encode", false,
       cases_of(vq_encode_cases, Fault::DotProductNearest)},
      {"exact copy of the reference", "linear_nvfp4", true,
       cases_of(linear_nvfp4_cases, Fault::ExactReferenceCopy)},
  };
  return r;
}

std::string backend_method(const std::string& kernel) {
  if (kernel == "linear_nvfp4" || kernel == "linear_bf16") return "linear";
  if (kernel == "non_finite_guard") return "sample_rows";  // the guard is part of sampling
  return kernel;
}

std::vector<std::string> covered_backend_methods() {
  std::vector<std::string> names;
  for (const KernelSpec& k : cpu_registry().kernels) {
    const std::string n = backend_method(k.name);
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  }
  return names;
}

}  // namespace drama::contract
