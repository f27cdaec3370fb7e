// Device ceilings measured on the CUDA backend's device, for the contract's limits and the
// benches (plain C++: callers outside src/backend/cuda/ include no CUDA header).
#pragma once

#include <string>

namespace drama::cuda {

struct DeviceCeilings {
  double copy_bytes_per_s = 0;  // device-to-device cudaMemcpy, bytes read + written, best of 5
  double fma_flops_per_s = 0;   // float32 fused multiply-adds over every SM, best of 3
  // Tensor cores: mma.sync m16n8k16 with bfloat16 inputs and float32 accumulation (the
  // instruction the BF16 products and version 3 of the expert products issue, mma.cuh), 2 x 16 x
  // 8 x 16 flops a call, independent tiles in every warp over every SM, best of 3. Not Hopper's
  // wgmma peak: the rate of the instruction the kernels use.
  double mma_bf16_flops_per_s = 0;
};

DeviceCeilings measure_device_ceilings();

// "NVIDIA H200, driver 570.xx, CUDA runtime 13.0, SM clock 1980 MHz, memory clock 3201 MHz".
std::string device_description();

}  // namespace drama::cuda
