// The per-unit moments of the per-layer measures (invfast.measure.units) in one read of the activations:
// for u [B, V, U] (B images, V views, U units; float32 or float64), the float64 mean and sum of squared
// deviations (M2) of every unit over each image's views ([B, U]) and over each view's images ([V, U]).
// Two passes per block of units (mean, then M2 about it: no cancellation, as the torch reference), the
// block's [B, V, w] values staying in cache between them; blocks spread over torch's threads as items.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <tuple>

#include "common/parallel.h"

namespace invfast {
namespace {

constexpr int64_t kBlock = 64;       // units per work item (a block of B x V x 64 values stays in L2)
constexpr double kMomentNs = 1.5;    // one-thread cost per input value (four reads, two of them from cache)

template <typename T>
void moments_block(const T* x, int64_t B, int64_t V, int64_t U, int64_t u0, int64_t w, double* mean_v,
                   double* m2_v, double* mean_b, double* m2_b) {
  double s[kBlock], q[kBlock];
  for (int64_t b = 0; b < B; ++b) {  // over each image's views
    std::fill(s, s + w, 0.0);
    for (int64_t v = 0; v < V; ++v) {
      const T* row = x + (b * V + v) * U + u0;
      for (int64_t j = 0; j < w; ++j) s[j] += static_cast<double>(row[j]);
    }
    for (int64_t j = 0; j < w; ++j) s[j] /= static_cast<double>(V);
    std::fill(q, q + w, 0.0);
    for (int64_t v = 0; v < V; ++v) {
      const T* row = x + (b * V + v) * U + u0;
      for (int64_t j = 0; j < w; ++j) {
        const double d = static_cast<double>(row[j]) - s[j];
        q[j] += d * d;
      }
    }
    std::copy(s, s + w, mean_v + b * U + u0);
    std::copy(q, q + w, m2_v + b * U + u0);
  }
  for (int64_t v = 0; v < V; ++v) {  // over each view's images
    std::fill(s, s + w, 0.0);
    for (int64_t b = 0; b < B; ++b) {
      const T* row = x + (b * V + v) * U + u0;
      for (int64_t j = 0; j < w; ++j) s[j] += static_cast<double>(row[j]);
    }
    for (int64_t j = 0; j < w; ++j) s[j] /= static_cast<double>(B);
    std::fill(q, q + w, 0.0);
    for (int64_t b = 0; b < B; ++b) {
      const T* row = x + (b * V + v) * U + u0;
      for (int64_t j = 0; j < w; ++j) {
        const double d = static_cast<double>(row[j]) - s[j];
        q[j] += d * d;
      }
    }
    std::copy(s, s + w, mean_b + v * U + u0);
    std::copy(q, q + w, m2_b + v * U + u0);
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> unit_moments_cpu(const at::Tensor& u_in) {
  TORCH_CHECK(u_in.device().is_cpu(), "unit_moments: u must be on the CPU, got ", u_in.device());
  TORCH_CHECK(u_in.dim() == 3, "unit_moments: u must be [B, V, U] (images, views, units), got shape ", u_in.sizes());
  TORCH_CHECK(u_in.scalar_type() == at::kFloat || u_in.scalar_type() == at::kDouble,
              "unit_moments: u must be float32 or float64, got ", u_in.scalar_type());
  TORCH_CHECK(u_in.size(0) >= 1 && u_in.size(1) >= 1, "unit_moments: u needs at least one image and one view, got "
              "shape ", u_in.sizes());
  const auto u = u_in.contiguous();
  const int64_t B = u.size(0), V = u.size(1), U = u.size(2);
  const auto opts = u.options().dtype(at::kDouble);
  auto mean_v = at::empty({B, U}, opts), m2_v = at::empty({B, U}, opts);
  auto mean_b = at::empty({V, U}, opts), m2_b = at::empty({V, U}, opts);
  double *mv = mean_v.data_ptr<double>(), *qv = m2_v.data_ptr<double>();
  double *mb = mean_b.data_ptr<double>(), *qb = m2_b.data_ptr<double>();
  const int64_t blocks = (U + kBlock - 1) / kBlock;
  AT_DISPATCH_FLOATING_TYPES(u.scalar_type(), "unit_moments", [&] {
    const scalar_t* x = u.data_ptr<scalar_t>();
    parallel::run_items(blocks, parallel::cost(B * V, U, kMomentNs), 0, [&](int64_t i, float*) {
      const int64_t u0 = i * kBlock;
      moments_block<scalar_t>(x, B, V, U, u0, std::min(kBlock, U - u0), mv, qv, mb, qb);
    });
  });
  return {mean_v, m2_v, mean_b, m2_b};
}

}  // namespace

TORCH_LIBRARY_IMPL(invfast, CPU, m) { m.impl("unit_moments", &unit_moments_cpu); }

}  // namespace invfast
