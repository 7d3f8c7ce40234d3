// CPU kernels for the invariance metrics: fused per-pair distance/cosine and the
// streamed pairwise log-sum-exp used by uniformity.
#include <torch/extension.h>
#include <torch/library.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/cpu_isa.h"
#include "common/parallel.h"

namespace invfast {
namespace {

constexpr double kPairNs = 1.0;  // one-thread cost of one (row, parameter, feature) of pair_scores: four products
constexpr double kLogSumExpNs = 4.0;  // of one (row, column) of sqdist_logsumexp: a distance and an exp

void check_pair_inputs(const at::Tensor& z_ref, const at::Tensor& z_t, const at::Tensor& shift) {
  TORCH_CHECK(z_ref.dim() == 2, "pair_scores: z_ref must be [N, D], got ", z_ref.dim(), " dims");
  TORCH_CHECK(z_t.dim() == 3, "pair_scores: z_t must be [N, P, D], got ", z_t.dim(), " dims");
  TORCH_CHECK(z_ref.size(0) == z_t.size(0), "pair_scores: N differs (", z_ref.size(0), " vs ", z_t.size(0), ")");
  TORCH_CHECK(z_ref.size(1) == z_t.size(2), "pair_scores: D differs (", z_ref.size(1), " vs ", z_t.size(2), ")");
  TORCH_CHECK(z_ref.scalar_type() == z_t.scalar_type() && shift.scalar_type() == z_t.scalar_type(),
              "pair_scores: z_ref, z_t and shift must share a dtype");
  TORCH_CHECK(shift.dim() == 1 && shift.size(0) == z_t.size(2), "pair_scores: shift must be [D]");
}

template <typename T>
void pair_scores_rows(const T* zr, const T* zt, const T* sh, T* dist, T* cosv, int64_t P, int64_t D, int64_t begin,
                      int64_t end) {
  for (int64_t r = begin; r < end; ++r) {
    const T* a = zr + (r / P) * D;
    const T* b = zt + r * D;
    double sdd = 0.0, sab = 0.0, saa = 0.0, sbb = 0.0;
#pragma omp simd reduction(+ : sdd, sab, saa, sbb)
    for (int64_t d = 0; d < D; ++d) {
      const double c = static_cast<double>(sh[d]);
      const double x = static_cast<double>(a[d]) - c;
      const double y = static_cast<double>(b[d]) - c;
      const double diff = x - y;
      sdd += diff * diff;
      sab += x * y;
      saa += x * x;
      sbb += y * y;
    }
    const double denom = std::sqrt(saa) * std::sqrt(sbb);
    dist[r] = static_cast<T>(std::sqrt(sdd));
    cosv[r] = static_cast<T>((denom > 0.0 || std::isnan(denom)) ? sab / denom : 0.0);  // NaN/Inf in: NaN out
  }
}

std::tuple<at::Tensor, at::Tensor> pair_scores_cpu(const at::Tensor& z_ref_in, const at::Tensor& z_t_in,
                                                   const at::Tensor& shift_in) {
  check_pair_inputs(z_ref_in, z_t_in, shift_in);
  const auto shift = shift_in.contiguous();
  const auto z_ref = z_ref_in.contiguous();
  const auto z_t = z_t_in.contiguous();
  const int64_t N = z_t.size(0), P = z_t.size(1), D = z_t.size(2);
  auto dist = at::empty({N, P}, z_t.options());
  auto cosv = at::empty({N, P}, z_t.options());
  if (N * P == 0) return {dist, cosv};
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(D, 1));
  AT_DISPATCH_FLOATING_TYPES(z_t.scalar_type(), "pair_scores_cpu", [&] {
    const scalar_t* zr = z_ref.data_ptr<scalar_t>();
    const scalar_t* zt = z_t.data_ptr<scalar_t>();
    const scalar_t* sh = shift.data_ptr<scalar_t>();
    scalar_t* dp = dist.data_ptr<scalar_t>();
    scalar_t* cp = cosv.data_ptr<scalar_t>();
    const int64_t items = (N * P + grain - 1) / grain;
    parallel::run_items(items, parallel::cost(N * P, D, kPairNs), 0, [&](int64_t i, float*) {
      pair_scores_rows<scalar_t>(zr, zt, sh, dp, cp, P, D, i * grain, std::min(N * P, (i + 1) * grain));
    });
  });
  return {dist, cosv};
}

// exp(x) for x <= 0 in float, written so that the compiler vectorises it (Cody-Waite range
// reduction and the Cephes polynomial; relative error ~2e-7). Inputs below -87 give ~1e-38.
static inline float exp_nonpositive(float x) {
  x = x < -87.0f ? -87.0f : x;
  // round to nearest with the 1.5*2^23 trick: no floor() call, so the loop stays vectorised on SSE2
  const float k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = x - k * 0.693359375f + k * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(k) + 127) << 23;
  return y * __builtin_bit_cast(float, bits);
}

// sum_j exp(-scale * max(sr + sx[j] - 2 g[j], 0) - m) over j in [lo, hi). The exponentials go
// through a small buffer so that the loop has no reduction and vectorises (with
// -fno-trapping-math); compiled for AVX2 and for the baseline, the core's ISA policy picks one.
INVFAST_ALWAYS_INLINE double row_sumexp_f32_impl(const float* g, const float* sx, float sr, float scale, float m, int64_t lo, int64_t hi) {
  constexpr int64_t kChunk = 1024;
  float buf[kChunk];
  double total = 0.0;
  for (int64_t c = lo; c < hi; c += kChunk) {
    const int64_t len = std::min(hi - c, kChunk);
    const float* gc = g + c;
    const float* sc = sx + c;
    for (int64_t j = 0; j < len; ++j) {
      float d2 = sr + sc[j] - 2.0f * gc[j];
      d2 = d2 > 0.0f ? d2 : 0.0f;
      buf[j] = exp_nonpositive(-scale * d2 - m);
    }
    float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
    int64_t j = 0;
    for (; j + 4 <= len; j += 4) {
      a0 += buf[j];
      a1 += buf[j + 1];
      a2 += buf[j + 2];
      a3 += buf[j + 3];
    }
    for (; j < len; ++j) a0 += buf[j];
    total += static_cast<double>(a0) + a1 + a2 + a3;
  }
  return total;
}
INVFAST_ISA_TWICE(, CpuIsa::kAvx2, INVFAST_TARGET("avx2"), double, row_sumexp_f32,
                  (const float* g, const float* sx, float sr, float scale, float m, int64_t lo, int64_t hi),
                  (g, sx, sr, scale, m, lo, hi))

INVFAST_ALWAYS_INLINE float row_max_f32_impl(const float* g, const float* sx, float sr, float scale, int64_t lo, int64_t hi) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t j = lo; j < hi; ++j) {
    float d2 = sr + sx[j] - 2.0f * g[j];
    d2 = d2 > 0.0f ? d2 : 0.0f;
    const float v = -scale * d2;
    m = v > m ? v : m;
  }
  return m;
}
INVFAST_ISA_TWICE(, CpuIsa::kAvx2, INVFAST_TARGET("avx2"), float, row_max_f32,
                  (const float* g, const float* sx, float sr, float scale, int64_t lo, int64_t hi),
                  (g, sx, sr, scale, lo, hi))

template <typename scalar_t>
void row_logsumexp_f64(const scalar_t* gi, const double* sx, double sr, double scale, int64_t self, int64_t N, double* out) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < N; ++j) {
    if (j == self) continue;
    const double d2 = std::max(sr + sx[j] - 2.0 * static_cast<double>(gi[j]), 0.0);
    m = std::max(m, -scale * d2);
  }
  if (!std::isfinite(m)) { *out = m; return; }
  double s = 0.0;
  for (int64_t j = 0; j < N; ++j) {
    if (j == self) continue;
    const double d2 = std::max(sr + sx[j] - 2.0 * static_cast<double>(gi[j]), 0.0);
    s += std::exp(-scale * d2 - m);
  }
  *out = m + std::log(s);
}

at::Tensor sqdist_logsumexp_cpu(const at::Tensor& rows_in, const at::Tensor& x_in, int64_t row_offset, double scale) {
  TORCH_CHECK(rows_in.dim() == 2 && x_in.dim() == 2, "sqdist_logsumexp: rows and x must be 2-D");
  TORCH_CHECK(rows_in.size(1) == x_in.size(1), "sqdist_logsumexp: D differs");
  TORCH_CHECK(rows_in.scalar_type() == x_in.scalar_type(), "sqdist_logsumexp: rows and x must share a dtype");
  const auto rows = rows_in.contiguous();
  const auto x = x_in.contiguous();
  const int64_t B = rows.size(0), N = x.size(0);
  auto out = at::empty({B}, rows.options().dtype(at::kDouble));
  if (B == 0) return out;
  const auto gram = at::mm(rows, x.t()).contiguous();
  double* op = out.data_ptr<double>();
  if (gram.scalar_type() == at::kFloat) {
    const auto sq_rows = rows.pow(2).sum(1).contiguous();
    const auto sq_x = x.pow(2).sum(1).contiguous();
    const float* g = gram.data_ptr<float>();
    const float* sr = sq_rows.data_ptr<float>();
    const float* sx = sq_x.data_ptr<float>();
    const float sc = static_cast<float>(scale);
    parallel::run_items(B, parallel::cost(B, N, kLogSumExpNs), 0, [&](int64_t i, float*) {
      const float* gi = g + i * N;
      const int64_t self = std::min(std::max<int64_t>(row_offset + i, 0), N);  // [lo, self) and (self, N)
      const int64_t skip = (row_offset + i >= 0 && row_offset + i < N) ? 1 : 0;
      const float m = std::max(row_max_f32(gi, sx, sr[i], sc, 0, self), row_max_f32(gi, sx, sr[i], sc, self + skip, N));
      if (!std::isfinite(m)) {
        op[i] = m;
        return;
      }
      const double s = row_sumexp_f32(gi, sx, sr[i], sc, m, 0, self) + row_sumexp_f32(gi, sx, sr[i], sc, m, self + skip, N);
      op[i] = static_cast<double>(m) + std::log(s);
    });
    return out;
  }
  const auto sq_rows = rows.to(at::kDouble).pow(2).sum(1).contiguous();
  const auto sq_x = x.to(at::kDouble).pow(2).sum(1).contiguous();
  const double* sr = sq_rows.data_ptr<double>();
  const double* sx = sq_x.data_ptr<double>();
  AT_DISPATCH_FLOATING_TYPES(gram.scalar_type(), "sqdist_logsumexp_cpu", [&] {
    const scalar_t* g = gram.data_ptr<scalar_t>();
    parallel::run_items(B, parallel::cost(B, N, kLogSumExpNs), 0, [&](int64_t i, float*) {
      row_logsumexp_f64<scalar_t>(g + i * N, sx, sr[i], scale, row_offset + i, N, op + i);
    });
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(invfast, CPU, m) {
  m.impl("pair_scores", &pair_scores_cpu);
  m.impl("sqdist_logsumexp", &sqdist_logsumexp_cpu);
}

}  // namespace invfast
