// The registry: every kernel of backend.h with its cases, tolerance reasoning and limit, and
// the planted controls (spec contract.md).
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

Registry kernel_registry() {
  Registry r;
  r.kernels = {
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
      kernel("route_topk", "moe", "ids exact; weights (n + k + 12)u relative", route_topk_cases,
             small_kernel_limit("route_topk")),
      kernel("expert_combine", "moe", "gamma_{2k+1} (|y| + sum|w e|)", expert_combine_cases,
             small_kernel_limit("expert_combine")),
      kernel("guidance_combine", "guidance", "4u (|u| + gamma (|c|+|u|))", guidance_combine_cases,
             elementwise_limit("guidance_combine")),
      kernel("sample", "sampling", "ids exact against the float64 sampler", sample_cases,
             small_kernel_limit("sample")),
      kernel("has_non_finite", "guard", "exact yes/no per row", has_non_finite_cases,
             elementwise_limit("has_non_finite")),
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
  r.controls = {
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
      {"fp16 intermediates", "swiglu", false, cases_of(swiglu_cases, Fault::Fp16Accumulation)},
      {"one wrong element in a million", "gelu", false,
       cases_of(gelu_cases, Fault::OneWrongElement)},
      {"unwritten output", "rms_norm", false, cases_of(rms_norm_cases, Fault::Unwritten)},
      {"wrong rotary pair", "rope", false, cases_of(rope_cases, Fault::WrongRotaryPair)},
      {"off-by-one top-k", "route_topk", false, cases_of(route_topk_cases, Fault::OffByOneTopk)},
      {"batch-dependent reduction order", "linear_bf16", false,
       cases_of(linear_bf16_cases, Fault::BatchDependentOrder)},
      {"exact copy of the reference", "linear_nvfp4", true,
       cases_of(linear_nvfp4_cases, Fault::ExactReferenceCopy)},
  };
  return r;
}

std::vector<std::string> covered_backend_methods() {
  std::vector<std::string> names;
  for (const KernelSpec& k : kernel_registry().kernels) {
    std::string n = k.name;
    if (n == "linear_nvfp4" || n == "linear_bf16") n = "linear";
    if (names.empty() || names.back() != n) names.push_back(n);
  }
  return names;
}

}  // namespace drama::contract
