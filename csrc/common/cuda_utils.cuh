// Shared CUDA helpers of invfast's kernels (invariance, augment, hyper): the 1-D launch shape and the warp
// and block reductions. Header-only; included by the .cu files only (nvcc), never by the C++ sources.
// Uses only CUDA built-ins, so the .cu files stay syntax-checkable against a CPU torch
// (tests/test_cuda_syntax.py).
#pragma once

#include <cmath>
#include <cstdint>

namespace invfast {
namespace cuda_utils {

constexpr int kThreads = 256;  // threads per block of the 1-D launches
constexpr int kWarpSize = 32;
constexpr int kWarpsPerBlock = kThreads / kWarpSize;  // shared doubles a block reduction needs

// Blocks of kThreads covering n items (n >= 0).
inline unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

__device__ __forceinline__ double warp_sum(double v) {
  for (int o = kWarpSize / 2; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ double warp_max(double v) {
  for (int o = kWarpSize / 2; o > 0; o >>= 1) v = fmax(v, __shfl_down_sync(0xffffffffu, v, o));
  return v;
}

// Sum of v over the block; the result is valid in thread 0. Every thread of the block must call it;
// `shared` holds blockDim.x / 32 doubles (kWarpsPerBlock for kThreads). The leading barrier lets one
// `shared` buffer serve consecutive reductions.
__device__ __forceinline__ double block_sum(double v, double* shared) {
  const int lane = threadIdx.x & (kWarpSize - 1), warp = threadIdx.x / kWarpSize;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = (threadIdx.x < blockDim.x / kWarpSize) ? shared[lane] : 0.0;
  if (warp == 0) v = warp_sum(v);
  return v;
}

// Maximum of v over the block (-inf for an empty block); valid in thread 0; same contract as block_sum.
__device__ __forceinline__ double block_max(double v, double* shared) {
  const int lane = threadIdx.x & (kWarpSize - 1), warp = threadIdx.x / kWarpSize;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = (threadIdx.x < blockDim.x / kWarpSize) ? shared[lane] : -INFINITY;
  if (warp == 0) v = warp_max(v);
  return v;
}

}  // namespace cuda_utils
}  // namespace invfast
