// CUDA kernels for batched hypernetwork weight generation (see hyper_cpu.cpp for the maths).
// Uses only the light c10/cuda headers, so nvcc can syntax-check it against a CPU torch.
//   forward:  one thread per output element (b, n); the kernel index of row n is found by a
//             binary search in `offsets`; rows of `weight` are read once per descriptor and
//             coalesced across a warp (consecutive n).
//   backward: grad_weight / grad_bias one thread per row n (loops over B and H);
//             grad_hidden per kernel with a GEMM on the kernel's slice.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <torch/library.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <vector>

namespace invfast {
namespace {

constexpr int kThreads = 256;

__device__ inline int64_t find_kernel(const int64_t* __restrict__ offsets, int64_t L, int64_t n) {
  int64_t lo = 0, hi = L - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) >> 1;
    if (offsets[mid] <= n) lo = mid; else hi = mid - 1;
  }
  return lo;
}

template <typename T>
__global__ void generate_kernel(const T* __restrict__ hidden, const T* __restrict__ weight, const T* __restrict__ bias,
                                const int64_t* __restrict__ offsets, T* __restrict__ out, int64_t B, int64_t L,
                                int64_t H, int64_t N) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const int64_t l = find_kernel(offsets, L, n);
  const T* w = weight + n * H;
  for (int64_t b = 0; b < B; ++b) {
    const T* h = hidden + (b * L + l) * H;
    float acc = static_cast<float>(bias[n]);
    double accd = static_cast<double>(bias[n]);
    for (int64_t k = 0; k < H; ++k) {
      if (sizeof(T) == 8) accd += static_cast<double>(w[k]) * static_cast<double>(h[k]);
      else acc += static_cast<float>(w[k]) * static_cast<float>(h[k]);
    }
    out[b * N + n] = sizeof(T) == 8 ? static_cast<T>(accd) : static_cast<T>(acc);
  }
}

template <typename T>
__global__ void grad_weight_kernel(const T* __restrict__ grad, const T* __restrict__ hidden,
                                   const int64_t* __restrict__ offsets, T* __restrict__ gw, T* __restrict__ gb,
                                   int64_t B, int64_t L, int64_t H, int64_t N) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const int64_t l = find_kernel(offsets, L, n);
  double sb = 0.0;
  for (int64_t b = 0; b < B; ++b) sb += static_cast<double>(grad[b * N + n]);
  gb[n] = static_cast<T>(sb);
  for (int64_t k = 0; k < H; ++k) {
    double s = 0.0;
    for (int64_t b = 0; b < B; ++b) {
      s += static_cast<double>(grad[b * N + n]) * static_cast<double>(hidden[(b * L + l) * H + k]);
    }
    gw[n * H + k] = static_cast<T>(s);
  }
}

void check_inputs(const at::Tensor& hidden, const at::Tensor& weight, at::IntArrayRef offsets, const char* who) {
  TORCH_CHECK(hidden.dim() == 3, who, ": hidden must be [B, L, H]");
  TORCH_CHECK(weight.dim() == 2, who, ": weight must be [N, H]");
  TORCH_CHECK(hidden.size(2) == weight.size(1), who, ": hidden size H differs");
  TORCH_CHECK(hidden.scalar_type() == weight.scalar_type(), who, ": hidden and weight must share a dtype");
  TORCH_CHECK(hidden.device() == weight.device(), who, ": hidden and weight must be on one device");
  const int64_t L = hidden.size(1);
  TORCH_CHECK(static_cast<int64_t>(offsets.size()) == L + 1, who, ": offsets must have L + 1 entries");
  TORCH_CHECK(offsets[0] == 0 && offsets[L] == weight.size(0), who, ": offsets must run from 0 to weight rows");
  for (int64_t l = 0; l < L; ++l) TORCH_CHECK(offsets[l + 1] >= offsets[l], who, ": offsets must be non-decreasing");
}

at::Tensor offsets_on(const at::Tensor& like, at::IntArrayRef offsets) {
  std::vector<int64_t> v(offsets.begin(), offsets.end());
  return at::tensor(v, at::TensorOptions().dtype(at::kLong)).to(like.device());
}

at::Tensor hyper_generate_cuda(const at::Tensor& hidden_in, const at::Tensor& weight_in, const at::Tensor& bias_in,
                               at::IntArrayRef offsets) {
  check_inputs(hidden_in, weight_in, offsets, "hyper_generate");
  TORCH_CHECK(bias_in.dim() == 1 && bias_in.size(0) == weight_in.size(0), "hyper_generate: bias must be [N]");
  TORCH_CHECK(bias_in.scalar_type() == weight_in.scalar_type(), "hyper_generate: bias must share weight's dtype");
  const c10::cuda::CUDAGuard guard(weight_in.device());
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  const auto hidden = hidden_in.contiguous();
  const auto weight = weight_in.contiguous();
  const auto bias = bias_in.contiguous();
  const int64_t B = hidden.size(0), L = hidden.size(1), H = hidden.size(2), N = weight.size(0);
  auto out = at::empty({B, N}, weight.options());
  if (B == 0 || N == 0 || L == 0) return out;
  const auto off = offsets_on(weight, offsets);
  const auto stream = c10::cuda::getCurrentCUDAStream();
  const int64_t blocks = (N + kThreads - 1) / kThreads;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, weight.scalar_type(), "hyper_generate_cuda", [&] {
    generate_kernel<scalar_t><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        hidden.data_ptr<scalar_t>(), weight.data_ptr<scalar_t>(), bias.data_ptr<scalar_t>(), off.data_ptr<int64_t>(),
        out.data_ptr<scalar_t>(), B, L, H, N);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> hyper_generate_backward_cuda(const at::Tensor& grad_in,
                                                                           const at::Tensor& hidden_in,
                                                                           const at::Tensor& weight_in,
                                                                           at::IntArrayRef offsets) {
  check_inputs(hidden_in, weight_in, offsets, "hyper_generate_backward");
  const c10::cuda::CUDAGuard guard(weight_in.device());
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  const auto grad = grad_in.contiguous();
  const auto hidden = hidden_in.contiguous();
  const auto weight = weight_in.contiguous();
  const int64_t B = hidden.size(0), L = hidden.size(1), H = hidden.size(2), N = weight.size(0);
  TORCH_CHECK(grad.dim() == 2 && grad.size(0) == B && grad.size(1) == N, "hyper_generate_backward: grad must be [B, N]");
  auto grad_weight = at::zeros({N, H}, weight.options());
  auto grad_bias = at::zeros({N}, weight.options());
  auto grad_hidden = at::zeros({B, L, H}, weight.options());
  if (B == 0 || N == 0 || L == 0) return {grad_hidden, grad_weight, grad_bias};
  const auto off = offsets_on(weight, offsets);
  const auto stream = c10::cuda::getCurrentCUDAStream();
  const int64_t blocks = (N + kThreads - 1) / kThreads;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, weight.scalar_type(), "hyper_generate_backward_cuda", [&] {
    grad_weight_kernel<scalar_t><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        grad.data_ptr<scalar_t>(), hidden.data_ptr<scalar_t>(), off.data_ptr<int64_t>(),
        grad_weight.data_ptr<scalar_t>(), grad_bias.data_ptr<scalar_t>(), B, L, H, N);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  for (int64_t l = 0; l < L; ++l) {
    const int64_t R = offsets[l + 1] - offsets[l];
    if (R == 0) continue;
    grad_hidden.select(1, l).copy_(at::mm(grad.narrow(1, offsets[l], R), weight.narrow(0, offsets[l], R)));
  }
  return {grad_hidden, grad_weight, grad_bias};
}

}  // namespace

TORCH_LIBRARY_IMPL(invfast, CUDA, m) {
  m.impl("hyper_generate", &hyper_generate_cuda);
  m.impl("hyper_generate_backward", &hyper_generate_backward_cuda);
}

}  // namespace invfast
