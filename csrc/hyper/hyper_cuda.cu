// CUDA kernels for batched hypernetwork weight generation (see hyper_cpu.cpp for the maths).
// Uses only the light c10/cuda headers, so nvcc can syntax-check it against a CPU torch.
//
// The work is memory-bound for small B: the packed output layer weight [N, H] (3.0 GB in fp32 for
// Hyper-ResNet-50) must be read once, and nothing else is large. Hence:
//   forward, B < kGemmMinB: one thread per row n of weight. The thread loads its whole row with
//     16-byte vector loads (H = 32: 8 x float4 in fp32, 4 x 16 B in bf16/fp16), issued back to back,
//     keeps it in registers (converted to the fp32 accumulation type) and produces out[b, n] for all B
//     descriptors; warps write consecutive n (coalesced). Each row is read from DRAM once for all B.
//     The kernel l of row n comes from a binary search of `offsets` (L + 1 entries, cached).
//   forward, B >= kGemmMinB: the work turns into a GEMM with a large output (B x N); one cuBLAS
//     addmm per kernel writes straight into its slice of out (conv-weight layout).
//   backward: grad_weight[n] = sum_b g[b, n] h[b, l(n)] and grad_bias[n] = sum_b g[b, n] in one
//     pass over g (thread per row, fp32 accumulators, vector stores) for B < kGemmMinB, cuBLAS
//     (g^T h per kernel) above; grad_hidden[:, l] = g[:, rows of l] . weight[rows of l] is one cuBLAS
//     GEMM per kernel (long reduction over the kernel's rows).
// kGemmMinB is a design choice that has not been measured (no GPU was available when this was
// written); the dispatch table (invfast/dispatch.py) keeps the torch reference as the CUDA default until it is.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <torch/library.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <cstdint>

#include "common/cuda_utils.cuh"
#include "hyper/hyper_common.h"
#include <vector>

namespace invfast {
namespace {

using cuda_utils::blocks_for;
using cuda_utils::kThreads;
constexpr int64_t kGemmMinB = 16;  // B from which the cuBLAS path serves (unmeasured design choice)
constexpr int kFixedH = 32;        // hidden size with the vectorised row kernels (the paper's 32)

__device__ __forceinline__ int64_t find_kernel(const int64_t* __restrict__ offsets, int64_t L, int64_t n) {
  int64_t lo = 0, hi = L - 1;  // the last l with offsets[l] <= n
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) >> 1;
    if (__ldg(offsets + mid) <= n) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// 16 bytes of T, loaded or stored in one vector instruction.
template <typename T>
struct alignas(16) Pack {
  static constexpr int kN = 16 / static_cast<int>(sizeof(T));
  T v[kN];
};

template <typename T>
__device__ __forceinline__ Pack<T> as_pack(uint4 u) {
  Pack<T> p;
  static_assert(sizeof(Pack<T>) == sizeof(uint4), "16-byte pack");
  memcpy(&p, &u, sizeof(uint4));
  return p;
}

// Vectorised forward for H = kFixedH: one thread per row, all B descriptors.
template <typename T>
__global__ void __launch_bounds__(kThreads) generate_rows_kernel(
    const T* __restrict__ hidden, const T* __restrict__ weight, const T* __restrict__ bias,
    const int64_t* __restrict__ offsets, T* __restrict__ out, int64_t B, int64_t L, int64_t N) {
  using acc_t = at::opmath_type<T>;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const int64_t l = find_kernel(offsets, L, n);
  constexpr int kN = Pack<T>::kN;
  acc_t w[kFixedH];
  {
    const uint4* src = reinterpret_cast<const uint4*>(weight + n * kFixedH);
    uint4 raw[kFixedH / kN];
#pragma unroll
    for (int i = 0; i < kFixedH / kN; ++i) raw[i] = __ldg(src + i);
#pragma unroll
    for (int i = 0; i < kFixedH / kN; ++i) {
      const Pack<T> p = as_pack<T>(raw[i]);
#pragma unroll
      for (int j = 0; j < kN; ++j) w[i * kN + j] = static_cast<acc_t>(p.v[j]);
    }
  }
  const acc_t bn = static_cast<acc_t>(bias[n]);
  for (int64_t b = 0; b < B; ++b) {
    const uint4* hs = reinterpret_cast<const uint4*>(hidden + (b * L + l) * kFixedH);
    acc_t acc = bn;
#pragma unroll
    for (int i = 0; i < kFixedH / kN; ++i) {
      const Pack<T> p = as_pack<T>(__ldg(hs + i));  // warp-uniform address: one broadcast load
#pragma unroll
      for (int j = 0; j < kN; ++j) acc += w[i * kN + j] * static_cast<acc_t>(p.v[j]);
    }
    out[b * N + n] = static_cast<T>(acc);
  }
}

// Any H, any alignment: the same thread-per-row scheme with scalar loads.
template <typename T>
__global__ void __launch_bounds__(kThreads) generate_rows_generic_kernel(
    const T* __restrict__ hidden, const T* __restrict__ weight, const T* __restrict__ bias,
    const int64_t* __restrict__ offsets, T* __restrict__ out, int64_t B, int64_t L, int64_t H, int64_t N) {
  using acc_t = at::opmath_type<T>;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const int64_t l = find_kernel(offsets, L, n);
  const T* w = weight + n * H;
  for (int64_t b = 0; b < B; ++b) {
    const T* h = hidden + (b * L + l) * H;
    acc_t acc = static_cast<acc_t>(bias[n]);
    for (int64_t k = 0; k < H; ++k) acc += static_cast<acc_t>(w[k]) * static_cast<acc_t>(h[k]);
    out[b * N + n] = static_cast<T>(acc);
  }
}

// grad_weight[n, :] = sum_b grad[b, n] * hidden[b, l(n), :], grad_bias[n] = sum_b grad[b, n]; one pass
// over grad (reads coalesced across the warp), accumulators in registers, 16-byte row stores.
template <typename T>
__global__ void __launch_bounds__(kThreads) grad_weight_rows_kernel(
    const T* __restrict__ grad, const T* __restrict__ hidden, const int64_t* __restrict__ offsets,
    T* __restrict__ gw, T* __restrict__ gb, int64_t B, int64_t L, int64_t N) {
  using acc_t = at::opmath_type<T>;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const int64_t l = find_kernel(offsets, L, n);
  constexpr int kN = Pack<T>::kN;
  acc_t acc[kFixedH];
#pragma unroll
  for (int k = 0; k < kFixedH; ++k) acc[k] = acc_t(0);
  acc_t sb = acc_t(0);
  for (int64_t b = 0; b < B; ++b) {
    const acc_t g = static_cast<acc_t>(grad[b * N + n]);
    sb += g;
    const uint4* hs = reinterpret_cast<const uint4*>(hidden + (b * L + l) * kFixedH);
#pragma unroll
    for (int i = 0; i < kFixedH / kN; ++i) {
      const Pack<T> p = as_pack<T>(__ldg(hs + i));
#pragma unroll
      for (int j = 0; j < kN; ++j) acc[i * kN + j] += g * static_cast<acc_t>(p.v[j]);
    }
  }
  gb[n] = static_cast<T>(sb);
  uint4* dst = reinterpret_cast<uint4*>(gw + n * kFixedH);
#pragma unroll
  for (int i = 0; i < kFixedH / kN; ++i) {
    Pack<T> p;
#pragma unroll
    for (int j = 0; j < kN; ++j) p.v[j] = static_cast<T>(acc[i * kN + j]);
    uint4 u;
    memcpy(&u, &p, sizeof(uint4));
    dst[i] = u;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) grad_weight_rows_generic_kernel(
    const T* __restrict__ grad, const T* __restrict__ hidden, const int64_t* __restrict__ offsets,
    T* __restrict__ gw, T* __restrict__ gb, int64_t B, int64_t L, int64_t H, int64_t N) {
  using acc_t = at::opmath_type<T>;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const int64_t l = find_kernel(offsets, L, n);
  acc_t sb = acc_t(0);
  for (int64_t b = 0; b < B; ++b) sb += static_cast<acc_t>(grad[b * N + n]);
  gb[n] = static_cast<T>(sb);
  for (int64_t k = 0; k < H; ++k) {
    acc_t s = acc_t(0);
    for (int64_t b = 0; b < B; ++b) {
      s += static_cast<acc_t>(grad[b * N + n]) * static_cast<acc_t>(hidden[(b * L + l) * H + k]);
    }
    gw[n * H + k] = static_cast<T>(s);
  }
}

at::Tensor offsets_on(const at::Tensor& like, at::IntArrayRef offsets) {
  std::vector<int64_t> v(offsets.begin(), offsets.end());
  return at::tensor(v, at::TensorOptions().dtype(at::kLong)).to(like.device(), /*non_blocking=*/true);
}

// The vectorised row kernels need H = kFixedH and 16-byte aligned rows (given by the contiguous
// tensors' base pointers, since kFixedH * sizeof(T) is a multiple of 16 for every dtype).
bool vector_rows_ok(const at::Tensor& a, const at::Tensor& b, int64_t H) {
  return H == kFixedH && reinterpret_cast<uintptr_t>(a.data_ptr()) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(b.data_ptr()) % 16 == 0;
}

at::Tensor hyper_generate_cuda(const at::Tensor& hidden_in, const at::Tensor& weight_in, const at::Tensor& bias_in,
                               at::IntArrayRef offsets) {
  hyper_common::check_inputs(hidden_in, weight_in, offsets, "hyper_generate");
  hyper_common::check_bias(bias_in, weight_in);
  const c10::cuda::CUDAGuard guard(weight_in.device());
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  const auto hidden = hidden_in.contiguous();
  const auto weight = weight_in.contiguous();
  const auto bias = bias_in.contiguous();
  const int64_t B = hidden.size(0), L = hidden.size(1), H = hidden.size(2), N = weight.size(0);
  auto out = at::empty({B, N}, weight.options());
  if (B == 0 || N == 0 || L == 0) return out;
  if (B >= kGemmMinB) {  // a real GEMM per kernel: cuBLAS, straight into the conv-weight layout
    hyper_common::generate_per_kernel_gemm(out, hidden, weight, bias, offsets);
    return out;
  }
  const auto off = offsets_on(weight, offsets);
  const auto stream = c10::cuda::getCurrentCUDAStream();
  const bool vec = vector_rows_ok(weight, hidden, H);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, weight.scalar_type(), "hyper_generate_cuda", [&] {
    if (vec) {
      generate_rows_kernel<scalar_t><<<blocks_for(N), kThreads, 0, stream>>>(
          hidden.data_ptr<scalar_t>(), weight.data_ptr<scalar_t>(), bias.data_ptr<scalar_t>(),
          off.data_ptr<int64_t>(), out.data_ptr<scalar_t>(), B, L, N);
    } else {
      generate_rows_generic_kernel<scalar_t><<<blocks_for(N), kThreads, 0, stream>>>(
          hidden.data_ptr<scalar_t>(), weight.data_ptr<scalar_t>(), bias.data_ptr<scalar_t>(),
          off.data_ptr<int64_t>(), out.data_ptr<scalar_t>(), B, L, H, N);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> hyper_generate_backward_cuda(const at::Tensor& grad_in,
                                                                           const at::Tensor& hidden_in,
                                                                           const at::Tensor& weight_in,
                                                                           at::IntArrayRef offsets) {
  hyper_common::check_inputs(hidden_in, weight_in, offsets, "hyper_generate_backward");
  const c10::cuda::CUDAGuard guard(weight_in.device());
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  const auto grad = grad_in.contiguous();
  const auto hidden = hidden_in.contiguous();
  const auto weight = weight_in.contiguous();
  const int64_t B = hidden.size(0), L = hidden.size(1), H = hidden.size(2), N = weight.size(0);
  TORCH_CHECK(grad.dim() == 2 && grad.size(0) == B && grad.size(1) == N, "hyper_generate_backward: grad must be [B, N]");
  TORCH_CHECK(grad.scalar_type() == weight.scalar_type(), "hyper_generate_backward: grad must share weight's dtype");
  auto grad_weight = at::empty({N, H}, weight.options());
  auto grad_bias = at::empty({N}, weight.options());
  auto grad_hidden_lbh = at::zeros({L, B, H}, weight.options());
  if (N == 0 || L == 0 || B == 0) {
    grad_weight.zero_();
    grad_bias.zero_();
    return {grad_hidden_lbh.permute({1, 0, 2}).contiguous(), grad_weight, grad_bias};
  }
  if (B >= kGemmMinB) {
    at::sum_out(grad_bias, grad, {0});
    for (int64_t l = 0; l < L; ++l) {
      const int64_t a = offsets[l], R = offsets[l + 1] - a;
      if (R == 0) continue;
      auto gw = grad_weight.narrow(0, a, R);
      at::mm_out(gw, grad.narrow(1, a, R).t(), hidden.select(1, l));
    }
  } else {
    const auto off = offsets_on(weight, offsets);
    const auto stream = c10::cuda::getCurrentCUDAStream();
    const bool vec = vector_rows_ok(grad_weight, hidden, H);
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, weight.scalar_type(), "hyper_generate_backward_cuda", [&] {
      if (vec) {
        grad_weight_rows_kernel<scalar_t><<<blocks_for(N), kThreads, 0, stream>>>(
            grad.data_ptr<scalar_t>(), hidden.data_ptr<scalar_t>(), off.data_ptr<int64_t>(),
            grad_weight.data_ptr<scalar_t>(), grad_bias.data_ptr<scalar_t>(), B, L, N);
      } else {
        grad_weight_rows_generic_kernel<scalar_t><<<blocks_for(N), kThreads, 0, stream>>>(
            grad.data_ptr<scalar_t>(), hidden.data_ptr<scalar_t>(), off.data_ptr<int64_t>(),
            grad_weight.data_ptr<scalar_t>(), grad_bias.data_ptr<scalar_t>(), B, L, H, N);
      }
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  }
  for (int64_t l = 0; l < L; ++l) {  // grad_hidden: one GEMM per kernel, reduction over its rows
    const int64_t a = offsets[l], R = offsets[l + 1] - a;
    if (R == 0) continue;
    auto dst = grad_hidden_lbh.select(0, l);
    at::mm_out(dst, grad.narrow(1, a, R), weight.narrow(0, a, R));
  }
  return {grad_hidden_lbh.permute({1, 0, 2}).contiguous(), grad_weight, grad_bias};
}

}  // namespace

TORCH_LIBRARY_IMPL(invfast, CUDA, m) {
  m.impl("hyper_generate", &hyper_generate_cuda);
  m.impl("hyper_generate_backward", &hyper_generate_backward_cuda);
}

}  // namespace invfast
