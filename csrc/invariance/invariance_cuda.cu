// CUDA kernels for the invariance metrics. Compiled only when torch is a CUDA build.
// Uses only the light c10/cuda headers, so nvcc can syntax-check it against a CPU torch.
// Accepts float, double, half and bfloat16 inputs; reductions accumulate in float64.
// NOT MEASURED: these kernels have never run on a GPU, so the dispatch table (invfast/dispatch.py) keeps the
// torch references as the CUDA default under `auto` (opt in with INVFAST_CUDA_KERNELS=invariance).
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <torch/library.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <cmath>

#include "common/cuda_utils.cuh"

namespace invfast {
namespace {

using cuda_utils::block_max;
using cuda_utils::block_sum;
using cuda_utils::kThreads;
using cuda_utils::kWarpsPerBlock;

template <typename T, typename O>
__global__ void pair_scores_kernel(const T* __restrict__ zr, const T* __restrict__ zt, const T* __restrict__ sh,
                                   O* __restrict__ dist,
                                   O* __restrict__ cosv, int64_t P, int64_t D) {
  __shared__ double red[4][kWarpsPerBlock];
  const int64_t r = blockIdx.x;
  const T* a = zr + (r / P) * D;
  const T* b = zt + r * D;
  double sdd = 0.0, sab = 0.0, saa = 0.0, sbb = 0.0;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    const double c = static_cast<double>(sh[d]);
    const double x = static_cast<double>(a[d]) - c;
    const double y = static_cast<double>(b[d]) - c;
    const double diff = x - y;
    sdd += diff * diff;
    sab += x * y;
    saa += x * x;
    sbb += y * y;
  }
  sdd = block_sum(sdd, red[0]);
  sab = block_sum(sab, red[1]);
  saa = block_sum(saa, red[2]);
  sbb = block_sum(sbb, red[3]);
  if (threadIdx.x == 0) {
    const double denom = sqrt(saa) * sqrt(sbb);
    dist[r] = static_cast<O>(sqrt(sdd));
    cosv[r] = static_cast<O>((denom > 0.0 || isnan(denom)) ? sab / denom : 0.0);  // NaN/Inf in: NaN out
  }
}

std::tuple<at::Tensor, at::Tensor> pair_scores_cuda(const at::Tensor& z_ref_in, const at::Tensor& z_t_in,
                                                    const at::Tensor& shift_in) {
  TORCH_CHECK(z_ref_in.dim() == 2 && z_t_in.dim() == 3, "pair_scores: expected z_ref [N, D] and z_t [N, P, D]");
  TORCH_CHECK(z_ref_in.size(0) == z_t_in.size(0) && z_ref_in.size(1) == z_t_in.size(2), "pair_scores: shapes differ");
  TORCH_CHECK(z_ref_in.scalar_type() == z_t_in.scalar_type() && shift_in.scalar_type() == z_t_in.scalar_type(),
              "pair_scores: z_ref, z_t and shift must share a dtype");
  TORCH_CHECK(shift_in.dim() == 1 && shift_in.size(0) == z_t_in.size(2), "pair_scores: shift must be [D]");
  const c10::cuda::CUDAGuard guard(z_t_in.device());
  const auto shift = shift_in.contiguous();
  const auto z_ref = z_ref_in.contiguous();
  const auto z_t = z_t_in.contiguous();
  const int64_t N = z_t.size(0), P = z_t.size(1), D = z_t.size(2);
  const bool reduced = z_t.scalar_type() == at::kHalf || z_t.scalar_type() == at::kBFloat16;
  const auto out_opts = z_t.options().dtype(reduced ? at::kFloat : z_t.scalar_type());
  auto dist = at::empty({N, P}, out_opts);
  auto cosv = at::empty({N, P}, out_opts);
  if (N * P == 0) return {dist, cosv};
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, z_t.scalar_type(), "pair_scores_cuda", [&] {
    using out_t = typename std::conditional<std::is_same<scalar_t, double>::value, double, float>::type;
    pair_scores_kernel<scalar_t, out_t><<<N * P, kThreads, 0, stream>>>(
        z_ref.data_ptr<scalar_t>(), z_t.data_ptr<scalar_t>(), shift.data_ptr<scalar_t>(), dist.data_ptr<out_t>(),
        cosv.data_ptr<out_t>(), P, D);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {dist, cosv};
}

template <typename T>
__global__ void row_logsumexp_kernel(const T* __restrict__ gram, const double* __restrict__ sq_rows,
                                     const double* __restrict__ sq_x, double* __restrict__ out, int64_t N,
                                     int64_t row_offset, double scale) {
  __shared__ double sh[kWarpsPerBlock];
  __shared__ double row_max;
  const int64_t i = blockIdx.x;
  const int64_t self = row_offset + i;
  const T* g = gram + i * N;
  const double si = sq_rows[i];
  double m = -INFINITY;
  for (int64_t j = threadIdx.x; j < N; j += blockDim.x) {
    if (j == self) continue;
    const double d2 = fmax(si + sq_x[j] - 2.0 * static_cast<double>(g[j]), 0.0);
    m = fmax(m, -scale * d2);
  }
  m = block_max(m, sh);
  if (threadIdx.x == 0) row_max = m;
  __syncthreads();
  m = row_max;
  double s = 0.0;
  if (isfinite(m)) {
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x) {
      if (j == self) continue;
      const double d2 = fmax(si + sq_x[j] - 2.0 * static_cast<double>(g[j]), 0.0);
      s += exp(-scale * d2 - m);
    }
  }
  s = block_sum(s, sh);
  if (threadIdx.x == 0) out[i] = isfinite(m) ? m + log(s) : m;
}

at::Tensor sqdist_logsumexp_cuda(const at::Tensor& rows_in, const at::Tensor& x_in, int64_t row_offset, double scale) {
  TORCH_CHECK(rows_in.dim() == 2 && x_in.dim() == 2 && rows_in.size(1) == x_in.size(1),
              "sqdist_logsumexp: expected rows [B, D] and x [N, D]");
  TORCH_CHECK(rows_in.scalar_type() == x_in.scalar_type(), "sqdist_logsumexp: rows and x must share a dtype");
  const c10::cuda::CUDAGuard guard(x_in.device());
  const bool reduced = x_in.scalar_type() == at::kHalf || x_in.scalar_type() == at::kBFloat16;
  const auto rows = (reduced ? rows_in.to(at::kFloat) : rows_in).contiguous();
  const auto x = (reduced ? x_in.to(at::kFloat) : x_in).contiguous();
  const int64_t B = rows.size(0), N = x.size(0);
  auto out = at::empty({B}, rows.options().dtype(at::kDouble));
  if (B == 0) return out;
  const auto gram = at::mm(rows, x.t()).contiguous();
  const auto sq_rows = rows.to(at::kDouble).pow(2).sum(1).contiguous();
  const auto sq_x = x.to(at::kDouble).pow(2).sum(1).contiguous();
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(gram.scalar_type(), "sqdist_logsumexp_cuda", [&] {
    row_logsumexp_kernel<scalar_t><<<B, kThreads, 0, stream>>>(gram.data_ptr<scalar_t>(), sq_rows.data_ptr<double>(),
                                                               sq_x.data_ptr<double>(), out.data_ptr<double>(), N,
                                                               row_offset, scale);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(invfast, CUDA, m) {
  m.impl("pair_scores", &pair_scores_cuda);
  m.impl("sqdist_logsumexp", &sqdist_logsumexp_cuda);
}

}  // namespace invfast
