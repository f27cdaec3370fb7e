// CUDA-only measurements for `drama bench decode --synthetic` (plain C++: callers include no CUDA
// header): the grouped expert kernels (Backend::moe_experts) as one CUDA graph replay, the
// version switch, a captured step's node count, the cost of that many empty launches and each
// kernel of a step timed alone.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace drama::cuda {

// Seconds per replay of backend.moe_experts(...) captured once as a CUDA graph (no launch gaps:
// what the per-frame graph sees), median of `replays` timed with device events. Throws
// drama::Error when `backend` is not the CUDA backend.
double time_moe_experts_graph(Backend& backend, const ExpertWeights* experts, int64_t n_stored,
                              const float* x, int64_t rows, int64_t hidden,
                              const int32_t* expert_index, int64_t k, int64_t out_slots, float* out,
                              float* workspace, int replays);

// Selects the grouped expert kernels Backend::moe_experts runs on `backend` (1 or 2, moe.cuh: the
// same bits, a different layout; 3: tensor cores, other bits) and returns the previous choice.
// The backend starts with DRAMA_CUDA_EXPERTS (v1, v2 or v3; unset: 3). Throws drama::Error when
// `backend` is not the CUDA backend or the version is none of them.
int set_moe_experts_version(Backend& backend, int version);

// Sets when version 3 of the grouped expert kernels runs its wide layout (the same bits as its
// own: moe.cuh) for every CUDA backend of the process: -1 where the experts average 12 pairs or
// more (the default), 0 never, N > 0 from N rows on. Drops `backend`'s captured graphs and
// returns the previous setting. Throws drama::Error when `backend` is not the CUDA backend or
// rows < -1.
int64_t set_wide_rows(Backend& backend, int64_t rows);

// Sets whether version 3's own layout of the grouped expert kernels reads its activations split
// ahead into their three bfloat16 terms (true, the default) or splits them in the kernel (false:
// the same bits, as before 2026-12-05; the wide layout always reads them split) for every CUDA
// backend of the process. Drops `backend`'s captured graphs and returns the previous setting.
// Throws drama::Error when `backend` is not the CUDA backend.
bool set_split_ahead(Backend& backend, bool on);

// Sets how many column tiles of 16 a block of version 3's own down takes (2, the default,
// DRAMA_CUDA_V3_DOWN_TILES=2: both tiles' loads issued together, half the blocks; or 1) for every
// CUDA backend of the process: the same bits. Drops `backend`'s captured graphs and returns the
// previous setting. Throws drama::Error when `backend` is not the CUDA backend or tiles is
// neither.
int set_v3_down_tiles(Backend& backend, int tiles);

// Nodes of the CUDA graph `backend` captured for run_captured(key, ...) (its launches), -1 when
// it holds none for the key. Throws drama::Error when `backend` is not the CUDA backend.
int64_t captured_graph_nodes(Backend& backend, const std::string& key);

// Seconds per replay of one CUDA graph of `kernels` empty kernels in a chain on the backend's
// stream (1 block of 32 threads each, each after the one before): what that many launches cost
// with no work in them, the floor of a captured step of as many launches. Median of `replays`.
double time_empty_kernel_chain(Backend& backend, int64_t kernels, int replays);

// Turns programmatic dependent launch (common.cuh) on or off for every CUDA backend of the
// process, drops `backend`'s captured graphs, and returns the previous setting. Throws
// drama::Error when `backend` is not the CUDA backend.
bool set_programmatic_launch(Backend& backend, bool on);

// Switches the BF16 matrix products of every CUDA backend of the process between tensor cores
// (true, the default) and the CUDA-core kernel (DRAMA_CUDA_LINEAR=cores: false), drops
// `backend`'s captured graphs, and returns the previous setting. Throws drama::Error when
// `backend` is not the CUDA backend.
bool set_tensor_linear(Backend& backend, bool on);

// Switches whether the tensor-core BF16 products stage their weight tiles in shared memory where
// they fit (true, the default unless DRAMA_CUDA_LINEAR_STAGED=0; the same bits either way:
// linear.cu) for every CUDA backend of the process, drops `backend`'s captured graphs, and returns
// the previous setting. Throws drama::Error when `backend` is not the CUDA backend.
bool set_linear_staged(Backend& backend, bool on);

// Switches whether the staged products take their lean loop where it fits (true, the default
// unless DRAMA_CUDA_LINEAR_LEAN=0; the same bits either way: linear.cu) for every CUDA backend of
// the process, drops `backend`'s captured graphs, and returns the previous setting. Throws
// drama::Error when `backend` is not the CUDA backend.
bool set_linear_lean(Backend& backend, bool on);

// Switches whether lean products of one or two rows split their rows once per block (true, the
// default unless DRAMA_CUDA_LINEAR_SPLIT=0; the same bits either way: linear.cu) for every CUDA
// backend of the process, drops `backend`'s captured graphs, and returns the previous setting.
// Throws drama::Error when `backend` is not the CUDA backend.
bool set_linear_split(Backend& backend, bool on);

// Sets from how many rows the tensor-core BF16 products take their wide layout (the same bits
// either way: linear.cu) for every CUDA backend of the process: -1 the default
// (DRAMA_CUDA_LINEAR_WIDE_ROWS, else 64), 0 never, N > 0 from N rows on. Drops `backend`'s
// captured graphs and returns the previous setting. Throws drama::Error when `backend` is not the
// CUDA backend or rows < -1.
int64_t set_linear_wide_rows(Backend& backend, int64_t rows);

// Switches the attention kernel of every CUDA backend of the process between version 2 (the query
// heads of a KV head sharing its cache reads, the default) and version 1 (a block per query head:
// DRAMA_CUDA_ATTENTION=v1), drops `backend`'s captured graphs, and returns the previous version.
// Throws drama::Error when `backend` is not the CUDA backend or the version is neither.
int set_attention_version(Backend& backend, int version);

// Sets where attention version 2 takes its quad layout (the same bits, attention.cu) for every
// CUDA backend of the process: -1 the default (where its blocks take 2 heads; else
// DRAMA_CUDA_ATTENTION_QUAD), 0 never, 1 always. Drops `backend`'s captured graphs and returns the
// previous setting. Throws drama::Error when `backend` is not the CUDA backend or quad is none of
// them.
int set_attention_quad(Backend& backend, int quad);

// A named range on the timeline for the Nsight tools (NVTX push and pop; nothing without a tool).
void push_range(const char* name);
void pop_range();

// Each kernel `work` launches on `backend` (not captured: graphs are off while it runs, so work
// under Backend::run_captured launches as it comes too), timed alone with device events in
// launch order: a spinning kernel holds the stream while the host queues the next launch, so a
// time is that kernel's own execution, without launch latency or the gaps between kernels (what
// a graph replay removes). `late` counts kernels the host queued only after
// the spin had ended (their times include the wait). Launches are named as check_launch names
// them (matrix products with their shape). Throws drama::Error when `backend` is not the CUDA
// backend.
struct KernelTime {
  std::string kernel;
  double us;
};
struct KernelTimes {
  std::vector<KernelTime> kernels;
  int64_t late = 0;
  double empty_kernel_us = 0;  // the median time of an empty kernel timed the same way (the floor)
};
KernelTimes time_each_kernel(Backend& backend, const std::function<void()>& work);

// Version 3's decode of NVFP4 weights (mma.cuh, e2m1x4_times_scale) run on the device: for each
// word of `words` (eight E2M1 codes) and each half of it, its four codes times the E4M3 block
// scale `scale`, as bfloat16 bit patterns: result[8 i + j] is code j of word i. For the test that
// the decode gives the reference's values. Throws drama::Error when `backend` is not the CUDA
// backend.
std::vector<uint16_t> decode_nvfp4_words(Backend& backend, const std::vector<uint32_t>& words,
                                         uint8_t scale);

}  // namespace drama::cuda
