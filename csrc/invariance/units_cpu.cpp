// The per-unit moments of the per-layer measures (invfast.measure.units) in one read of the activations:
// for u [B, V, U] (B images, V views, U units; float32 or float64), the float64 mean and sum of squared
// deviations (M2) of every unit over each image's views ([B, U]) and over each view's images ([V, U]), merged
// into running moments in place (Chan et al.'s pairwise update). Two passes per block of units (mean, then M2
// about it: no cancellation, as the torch reference), the block's [B, V, w] values staying in cache between
// them; blocks spread over torch's threads as items. No torch op runs per chunk: on a shared machine each one
// would fork a thread team and wait for a descheduled thread.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>

#include "common/cpu_isa.h"
#include "common/parallel.h"
#include "common/no_fp_contract.h"  // after every other include

namespace invfast {
namespace {

constexpr int64_t kBlock = 64;       // units per work item (a block of B x V x 64 values stays in L2)
constexpr double kMomentNs = 1.5;    // one-thread cost per input value (four reads, two of them from cache)

// The loops below are inlined into each build of merge_block (baseline and AVX-512).
#define INVFAST_INLINE inline __attribute__((always_inline))
#define INVFAST_INLINE_LAMBDA __attribute__((always_inline))

// Merge the moments (mean ``m``, M2 ``q``) of ``k`` more values into the running ``mean``, ``m2`` of ``n`` values.
INVFAST_INLINE void merge(double* mean, double* m2, int64_t n, const double* m, const double* q, int64_t k, int64_t w) {
  if (n == 0) {
    std::copy(m, m + w, mean);
    std::copy(q, q + w, m2);
    return;
  }
  const double total = static_cast<double>(n + k);
  const double fk = static_cast<double>(k) / total, fnk = static_cast<double>(n) * static_cast<double>(k) / total;
  for (int64_t j = 0; j < w; ++j) {
    const double delta = m[j] - mean[j];
    mean[j] += delta * fk;
    m2[j] += q[j] + delta * delta * fnk;
  }
}

// The mean and M2 over ``n`` rows ``row(i)`` (each ``w`` values) in two passes, into ``m`` and ``q``.
template <typename T, typename Row>
INVFAST_INLINE void two_pass(int64_t n, Row row, int64_t w, double* m, double* q) {
  std::fill(m, m + w, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const T* r = row(i);
    for (int64_t j = 0; j < w; ++j) m[j] += static_cast<double>(r[j]);
  }
  for (int64_t j = 0; j < w; ++j) m[j] /= static_cast<double>(n);
  std::fill(q, q + w, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const T* r = row(i);
    for (int64_t j = 0; j < w; ++j) {
      const double d = static_cast<double>(r[j]) - m[j];
      q[j] += d * d;
    }
  }
}

struct Running {  // running moments over views [B, U] (of n_v views) and over images [V, U] (of n_b images)
  double *mean_v, *m2_v, *mean_b, *m2_b;
  int64_t n_v, n_b;
};

template <typename T>
INVFAST_INLINE void merge_block_body(const T* x, int64_t B, int64_t V, int64_t U, int64_t u0, int64_t w,
                                     const Running& r) {
  double m[kBlock], q[kBlock];
  for (int64_t b = 0; b < B; ++b) {  // over each image's views
    two_pass<T>(V, [&](int64_t v) INVFAST_INLINE_LAMBDA { return x + (b * V + v) * U + u0; }, w, m, q);
    merge(r.mean_v + b * U + u0, r.m2_v + b * U + u0, r.n_v, m, q, V, w);
  }
  for (int64_t v = 0; v < V; ++v) {  // over each view's images
    two_pass<T>(B, [&](int64_t b) INVFAST_INLINE_LAMBDA { return x + (b * V + v) * U + u0; }, w, m, q);
    merge(r.mean_b + v * U + u0, r.m2_b + v * U + u0, r.n_b, m, q, B, w);
  }
}

// The loops in the baseline ISA, and on x86-64 once more for AVX-512. Every value takes the same IEEE operations
// in the same order in both (the loops run across units, each unit's sums in row order; AVX-512 implies FMA, but
// no_fp_contract.h keeps a*b+c from being fused), so the results are the same bits, only more units at once.
template <typename T>
void merge_block(const T* x, int64_t B, int64_t V, int64_t U, int64_t u0, int64_t w, const Running& r) {
  merge_block_body<T>(x, B, V, U, u0, w, r);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define INVFAST_AVX512_BUILD 1
template <typename T>
__attribute__((target("avx512f"))) void merge_block_avx512(const T* x, int64_t B, int64_t V, int64_t U, int64_t u0,
                                                          int64_t w, const Running& r) {
  merge_block_body<T>(x, B, V, U, u0, w, r);
}
#else
#define INVFAST_AVX512_BUILD 0
#endif

// Whether to take the AVX-512 build: where the core's ISA policy allows AVX-512 (common/cpu_isa.h; the
// environment variable INVFAST_CPU_ISA=baseline or avx2 compares the two builds). Elsewhere only the baseline.
bool vector_path() {
#if INVFAST_AVX512_BUILD
  return cpu_isa_at_least(CpuIsa::kAvx512);
#else
  return false;
#endif
}

void check_running(const at::Tensor& t, int64_t rows, int64_t U, const char* name) {
  TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == at::kDouble && t.is_contiguous() && t.dim() == 2 &&
                  t.size(0) == rows && t.size(1) == U,
              "merge_unit_moments_: ", name, " must be a contiguous float64 CPU tensor of shape [", rows, ", ", U,
              "], got ", t.scalar_type(), " of shape ", t.sizes());
}

void merge_unit_moments_cpu(const at::Tensor& u_in, const at::Tensor& mean_v, const at::Tensor& m2_v, int64_t n_v,
                            const at::Tensor& mean_b, const at::Tensor& m2_b, int64_t n_b) {
  TORCH_CHECK(u_in.device().is_cpu(), "merge_unit_moments_: u must be on the CPU, got ", u_in.device());
  TORCH_CHECK(u_in.dim() == 3, "merge_unit_moments_: u must be [B, V, U] (images, views, units), got shape ",
              u_in.sizes());
  TORCH_CHECK(u_in.scalar_type() == at::kFloat || u_in.scalar_type() == at::kDouble,
              "merge_unit_moments_: u must be float32 or float64, got ", u_in.scalar_type());
  TORCH_CHECK(u_in.size(0) >= 1 && u_in.size(1) >= 1,
              "merge_unit_moments_: u needs at least one image and one view, got shape ", u_in.sizes());
  TORCH_CHECK(n_v >= 0 && n_b >= 0, "merge_unit_moments_: the counts must be >= 0, got ", n_v, " and ", n_b);
  const auto u = u_in.contiguous();
  const int64_t B = u.size(0), V = u.size(1), U = u.size(2);
  check_running(mean_v, B, U, "mean_v");
  check_running(m2_v, B, U, "m2_v");
  check_running(mean_b, V, U, "mean_b");
  check_running(m2_b, V, U, "m2_b");
  const Running r{mean_v.data_ptr<double>(), m2_v.data_ptr<double>(), mean_b.data_ptr<double>(),
                  m2_b.data_ptr<double>(), n_v, n_b};
  const int64_t blocks = (U + kBlock - 1) / kBlock;
  static const bool avx512 = vector_path();
  AT_DISPATCH_FLOATING_TYPES(u.scalar_type(), "merge_unit_moments_", [&] {
    const scalar_t* x = u.data_ptr<scalar_t>();
    parallel::run_items(blocks, parallel::cost(B * V, U, kMomentNs), 0, [&](int64_t i, float*) {
      const int64_t u0 = i * kBlock, w = std::min(kBlock, U - u0);
#if INVFAST_AVX512_BUILD
      if (avx512) {
        merge_block_avx512<scalar_t>(x, B, V, U, u0, w, r);
        return;
      }
#endif
      merge_block<scalar_t>(x, B, V, U, u0, w, r);
    });
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(invfast, CPU, m) { m.impl("merge_unit_moments_", &merge_unit_moments_cpu); }

}  // namespace invfast
