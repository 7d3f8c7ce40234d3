// Pieces of hyper_generate shared by the CPU and CUDA kernels (host code, device-generic ATen).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace invfast {
namespace hyper_common {

// hidden [B, L, H], weight [N, H] (bias [N] when given) and offsets (L + 1 entries, 0 .. N, non-decreasing).
inline void check_inputs(const at::Tensor& hidden, const at::Tensor& weight, at::IntArrayRef offsets, const char* who) {
  TORCH_CHECK(hidden.dim() == 3, who, ": hidden must be [B, L, H], got ", hidden.dim(), " dims");
  TORCH_CHECK(weight.dim() == 2, who, ": weight must be [N, H], got ", weight.dim(), " dims");
  TORCH_CHECK(hidden.size(2) == weight.size(1), who, ": hidden size H differs (", hidden.size(2), " vs ",
              weight.size(1), ")");
  TORCH_CHECK(hidden.scalar_type() == weight.scalar_type(), who, ": hidden and weight must share a dtype");
  TORCH_CHECK(at::isFloatingType(weight.scalar_type()), who, ": floating dtype required");
  TORCH_CHECK(hidden.device() == weight.device(), who, ": hidden and weight must be on one device");
  const int64_t L = hidden.size(1);
  TORCH_CHECK(static_cast<int64_t>(offsets.size()) == L + 1, who, ": offsets must have L + 1 = ", L + 1,
              " entries, got ", offsets.size());
  TORCH_CHECK(offsets[0] == 0, who, ": offsets[0] must be 0");
  for (int64_t l = 0; l < L; ++l) {
    TORCH_CHECK(offsets[l + 1] >= offsets[l], who, ": offsets must be non-decreasing");
  }
  TORCH_CHECK(offsets[L] == weight.size(0), who, ": offsets[-1] (", offsets[L], ") must equal weight rows (",
              weight.size(0), ")");
}

inline void check_bias(const at::Tensor& bias, const at::Tensor& weight) {
  TORCH_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), "hyper_generate: bias must be [N] with N = weight rows");
  TORCH_CHECK(bias.scalar_type() == weight.scalar_type(), "hyper_generate: bias must share weight's dtype");
}

// out[:, offsets[l]:offsets[l+1]] = bias + hidden[:, l] @ weight[rows of l]^T: one BLAS GEMM per kernel,
// written straight into the conv-weight layout of `out` [B, N].
inline void generate_per_kernel_gemm(at::Tensor& out, const at::Tensor& hidden, const at::Tensor& weight,
                                     const at::Tensor& bias, at::IntArrayRef offsets) {
  const int64_t L = hidden.size(1);
  for (int64_t l = 0; l < L; ++l) {
    const int64_t a = offsets[l], R = offsets[l + 1] - a;
    if (R == 0) continue;
    auto dst = out.narrow(1, a, R);
    at::addmm_out(dst, bias.narrow(0, a, R).unsqueeze(0), hidden.select(1, l), weight.narrow(0, a, R).t());
  }
}

}  // namespace hyper_common
}  // namespace invfast
