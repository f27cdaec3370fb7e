// Deterministic sampling (spec section 6): temperature, top-k, top-p, and a counter-based uniform
// keyed by (seed, frame, codebook). tools/reference/ implements the same steps; keep them in step.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

// The generator is shared with the CUDA sampler (src/backend/cuda/sampling.cu): one definition.
#ifdef __CUDACC__
#define DRAMA_HOST_DEVICE __host__ __device__
#else
#define DRAMA_HOST_DEVICE
#endif

namespace drama {

// SplitMix64 finaliser.
DRAMA_HOST_DEVICE inline uint64_t mix64(uint64_t z) {
  z ^= z >> 30;
  z *= 0xbf58476d1ce4e5b9ull;
  z ^= z >> 27;
  z *= 0x94d049bb133111ebull;
  z ^= z >> 31;
  return z;
}

// u in [0, 1) with 53 random bits; depends only on its three keys.
DRAMA_HOST_DEVICE inline double counter_uniform(uint64_t seed, uint64_t frame, uint64_t codebook) {
  uint64_t z = mix64(seed + 0x9e3779b97f4a7c15ull * (frame + 1));
  z = mix64(z + 0xbf58476d1ce4e5b9ull * (codebook + 1));
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

// Steps, in order:
// 1. temperature <= 0: argmax, lowest id on ties.
// 2. s_i = logits_i / temperature (float32).
// 3. candidates sorted by s descending, ties lower id first; top_k > 0 keeps the first top_k.
// 4. p_i = exp(double(s_i) - double(s_max)); top_p < 1 keeps the shortest prefix whose sum
//    reaches top_p * (sum over candidates), at least one.
// 5. target = u * (sum of kept p); the first kept candidate whose running sum exceeds target
//    (the last one if rounding leaves none).
int32_t sample_logits(std::span<const float> logits, float temperature, int32_t top_k, float top_p,
                      double u);

// The same with the caller's scratch: no allocation once its vectors hold logits.size()
// elements (reserve_sample_scratch), as a decode step needs.
struct SampleScratch {
  std::vector<float> s;
  std::vector<int32_t> order;
  std::vector<double> p;
};
void reserve_sample_scratch(SampleScratch& scratch, size_t vocab);
int32_t sample_logits(std::span<const float> logits, float temperature, int32_t top_k, float top_p,
                      double u, SampleScratch& scratch);

}  // namespace drama
