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
  // One planted fault per kernel family below (each imitates a plausible bug of that kernel).
  NeighbourScaleBlock,     // dequantize: each block uses its neighbour's scale
  MissingLastId,           // embed_sum: the last id of every row left out of the sum
  WindowPlusOne,           // attention: one position before the window attended too
  NeighbourCache,          // attention: a row reads the next sequence's cache
  TruncatedAdd,            // add: the sum rounded toward zero instead of to nearest
  Fp16Intermediates,       // sigmoid, elu: float16 arithmetic
  NeighbourExpert,         // moe_experts: the last rank's pair routed to the next stored expert
  SharedExpertOrder,       // moe_experts: reduction order depends on the rows sharing an expert
  NeighbourRankWeight,     // expert_combine: rank j weighted by rank j+1's weight
  GammaOnWrongBranch,      // guidance_combine: c + gamma (u - c)
  OffByOneUniform,         // sample_rows: the uniform of the next frame
  IgnoredTopP,             // sample_rows: top-p not applied
  GuardMissesNegativeInf,  // sample_rows: -inf not seen by the non-finite guard
  ShiftedTap,              // conv1d: the last tap reads one position late
  DroppedLastTap,          // conv_transpose1d: the last tap never added
  UnbiasedVariance,        // layer_norm: variance divided by dim - 1
  Bf16Scale,               // scale_rows: the scale rounded to bfloat16
  NextCodebookRow,         // vq_decode: the row after the code
  DotProductNearest,       // vq_encode: largest dot product instead of least squared distance
  IgnoredColumnStride,     // copy_2d: src_col_stride taken as 1
  LastColumnLeft,          // fill: the last column of every row left unfilled
  WrongDestinationRow,     // copy_rows: the last pair written one row down
  DroppedOffset,           // gather_ids: offset ignored
  CacheBeforeRotary,       // qk_norm_rope_cache: k stored into the cache before its rotary
  NeighbourProductWeight,  // linears: the second product made with the first product's weight
  SumOnUnzeroedOutput,     // expert_sum: the sum added to what the output held
  ResidualLeftOut,         // linear_add, expert_sum_add: the result stored over y, not added
  NormBeforeAdd,           // expert_sum_add_norm: yn normalises y as it was before the add
};

std::vector<KernelCase> linear_nvfp4_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> linear_bf16_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> linears_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> linear_add_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> dequantize_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> embed_sum_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> rms_norm_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> rope_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> qk_norm_rope_cache_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> attention_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> swiglu_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> add_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> route_topk_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> expert_combine_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> expert_sum_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> expert_sum_add_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> expert_sum_add_norm_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> guidance_combine_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> sample_rows_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> non_finite_guard_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> sigmoid_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> moe_experts_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> copy_2d_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> fill_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> copy_rows_cases(uint64_t seed, Fault fault);
std::vector<KernelCase> gather_ids_cases(uint64_t seed, Fault fault);
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
Limit linears_limit();
Limit linear_add_limit();
Limit dequantize_limit();
Limit elementwise_limit(const char* kernel);
Limit attention_limit();
Limit conv1d_limit();
Limit conv_transpose1d_limit();
Limit small_kernel_limit(const char* kernel);
Limit moe_experts_limit();
Limit sample_rows_limit();
Limit copy_limit(const char* kernel);

}  // namespace drama::contract
