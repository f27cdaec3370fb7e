// Case builders of every registered kernel. Each takes the trial seed and a planted fault (None in
// the registry proper; the controls reuse the same inputs, references and bounds with a fault).
#pragma once

#include <vector>

#include "contract/contract.h"

namespace drama::contract {

enum class Fault {
  None,
  SwappedNibbles,       // NVFP4 element 2j read from the high nibble
  WrongScaleBlock,      // each block uses its neighbour's scale
  MissingGlobalScale,   // weight_scale_2 ignored
  SkippedTailBlock,     // the last block of every row skipped
  Fp16Accumulation,     // products summed in float16
  BatchDependentOrder,  // reduction order depends on the batch size
  ExactReferenceCopy,   // the float64 reference rounded to float32: must pass
  OneWrongElement,      // one element in a million off by 1e-4 relative
  Unwritten,            // the last output element never written
  WrongRotaryPair,      // rotary pairs (2i, 2i+1) instead of (i, i + d/2)
  OffByOneTopk,         // the k-th expert replaced by the (k+1)-th
};

std::vector<KernelCase> linear_nvfp4_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> linear_bf16_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> dequantize_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> embed_sum_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> rms_norm_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> rope_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> attention_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> swiglu_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> add_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> route_topk_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> expert_combine_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> guidance_combine_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> sample_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> has_non_finite_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> conv1d_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> conv_transpose1d_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> elu_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> gelu_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> layer_norm_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> scale_rows_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> vq_decode_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> vq_encode_cases(uint64_t seed, Fault fault);

// Limits (one stated size each).
Limit linear_nvfp4_limit();
Limit linear_bf16_limit();
Limit dequantize_limit();
Limit elementwise_limit(const char* kernel);
Limit attention_limit();
Limit conv1d_limit();
Limit conv_transpose1d_limit();
Limit small_kernel_limit(const char* kernel);

}  // namespace drama::contract
