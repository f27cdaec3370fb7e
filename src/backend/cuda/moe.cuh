// Mixture-of-experts routing and combination (spec sections 1 and 5). Routing runs one block per
// row: the block ranks the stored experts by original id, one thread sums the exp terms in
// increasing original id (the CPU backend's order), then k rounds of a block-wide arg-max pick
// the top-k (ties to the lower original id) and one thread renormalises in rank order. The combine
// is one thread per output element, experts in rank order.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/backend.h"

namespace drama::cuda {

// One stored expert's weights on the device (gate, up, down), for the grouped expert kernels.
struct DeviceExpert {
  const void* data[3];
  const uint8_t* scales[3];
  float scale2[3];
};

// The routed experts of a layer for all rows in three launches, the expert choice never leaving
// the device: (1) one block groups the (row, rank) pairs by stored expert (row, then rank order
// within an expert) and lists the chosen experts in increasing stored index; (2) per chosen
// expert and 8 intermediate columns, each warp forms the gate and up dot products of its column
// for every pair of that expert (each weight read once for all of them) and writes
// silu(gate) * up; (3) likewise the down product into out[(r * out_slots + j), :]. The dot
// products are those of the CUDA-core linear() (linear_dot.cuh) and the activation is swiglu()'s
// formula, so every element has the bits of the separate CUDA-core linear, swiglu and linear calls.
// Version 2 (NVFP4 experts whose hidden and intermediate sizes are multiples of 16, when the
// shared tiles fit the device) runs the same arithmetic from weight tiles copied into shared
// memory with cp.async and activations staged once per block (moe.cu): the bits of version 1.
// Version 3 (NVFP4, sizes multiples of 16; the default since 2026-12-04) runs the products on
// tensor cores (mma.cuh): batch invariant, other bits; where the experts average 12 pairs or more
// (DRAMA_CUDA_WIDE_ROWS overrides: moe.cu), in a layout for experts with many pairs, with the
// same bits. BF16 experts, or shapes a version does not take: version 1.
// Sets the choice of version 3's layout process-wide and returns the previous one: -1 by pairs an
// expert (the default), 0 never the wide layout, N > 0 the wide layout from N rows on
// (set_wide_rows in grouped_experts.h drops the graphs too).
int64_t set_wide_rows_flag(int64_t rows);
// Sets whether version 3's own layout reads its activations split ahead (true, the default) or
// splits them in the kernel as before (the same bits); returns the previous setting.
bool set_split_ahead_flag(bool on);
// Sets the column tiles of 16 a block of version 3's own down (1 or 2; the same bits) and returns
// the previous setting; throws drama::Error for any other value.
int set_v3_down_tiles_flag(int tiles);
// Throws drama::Error for a DRAMA_CUDA_WIDE_ROWS that is not a row count or a
// DRAMA_CUDA_V3_DOWN_TILES that is not 1 or 2.
void check_experts_environment();
// Device floats launch_moe_experts uses of its workspace (at most Backend::moe_workspace_floats).
int64_t moe_layout_floats(int64_t rows, int64_t k, int64_t hidden, int64_t inter, int64_t n_stored);
// on16: every stored expert's codes and block scales start on 16 bytes (the wide layout's whole
// chunks need it, with hidden and intermediate sizes multiples of 128).
void launch_moe_experts(const DeviceExpert* experts, WeightFormat format, int64_t n_stored,
                        bool on16, int64_t hidden, int64_t inter, const float* x, int64_t rows,
                        const int32_t* expert_index, int64_t k, int64_t out_slots, float* out,
                        float* workspace, cudaStream_t stream, int version);

void launch_route_topk(const float* logits, int64_t rows, int64_t logit_stride,
                       const int32_t* logit_column, const int32_t* original_id, int64_t n_stored,
                       int64_t k, bool norm_topk, int32_t* expert_index, float* weight,
                       cudaStream_t stream);
// kCombine: expert_combine (y += the sum, started from y); kSum: expert_sum (y = 0 + the sum, y
// not read); kSumAdd: expert_sum_add (y = y + (0 + the sum)).
enum class CombineMode { kCombine, kSum, kSumAdd };
void launch_expert_combine(const float* expert_out, const float* weight, int64_t rows, int64_t k,
                           int64_t dim, float* y, cudaStream_t stream, CombineMode mode);
// expert_sum_add then rms_norm of the new y into yn, in one launch (Backend::expert_sum_add_norm);
// counters: `rows` zeroed counters (CudaBackend::counters), left zeroed.
void launch_expert_sum_add_norm(const float* expert_out, const float* weight, int64_t rows,
                                int64_t k, int64_t dim, float* y, const uint16_t* norm_w, float eps,
                                float* yn, unsigned* counters, cudaStream_t stream);

}  // namespace drama::cuda
