// CPU kernels of the all-pairs ops behind uniformity and ACR (schemas in invariance_ops.cpp).
//
// Both stream the N x N inner products block by block: G = X_b X^T by one GEMM (at::mm, BLAS) in the dtype
// of x, then, per pair, the squared distance in float64 (for_row_blocks: one parallel region per call, row
// blocks taken from a shared counter by each thread, each with its own tile and a one-thread GEMM)
//     d~2_ij = q_i + q_j - 2 G_ij / (n_i n_j),   n_i = ||x_i|| (normalize) or 1,  q_i = ||x_i / n_i||^2.
//
// Error bound. A dot product of length D accumulated in unit roundoff u (any order, with or without FMA)
// satisfies |fl(x.y) - x.y| <= gamma_D sum_k |x_k y_k| <= gamma_D ||x|| ||y||, gamma_D = D u / (1 - D u)
// (Higham, Accuracy and Stability of Numerical Algorithms, 3.1). With the float64 arithmetic after the GEMM
// (a few ulps of q_i + q_j), and 2 ||x_i / n_i|| ||x_j / n_j|| <= q_i + q_j:
//     |d~2_ij - d2_ij| <= E_ij = c (q_i + q_j),   c = gamma_D + 2^-48.
// The subtraction cancels for near-duplicate rows (d2 << E): a pair with d~2 <= kappa E_ij (kappa = 256) is
// recomputed exactly as sum_k (x_ik / n_i - x_jk / n_j)^2 in float64. Every squared distance used therefore
// has |error| <= min(E_ij, d2_ij / (kappa - 1)) (up to float64 rounding).
//   pairwise_logsumexp: the log-sum-exp moves by at most scale * max |error| (it is 1-Lipschitz in the max
//     norm of its arguments); exponentials and sums in float64 with a running max per row.
//   knn_sqdist: candidates are every j with d~2_ij <= tau_i + 2 max_j E_ij (tau_i the k-th smallest d~2 of
//     the row), a superset of the true k nearest; their distances are recomputed exactly, then sorted.
#include <torch/extension.h>
#include <torch/library.h>
#include <ATen/Parallel.h>

#include "common/cpu_isa.h"
#include "common/parallel.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

namespace invfast {
namespace {

constexpr double kKappa = 256.0;
constexpr int64_t kChunk = 1024;  // columns per pass of a row (its float64 buffer stays in L1)
constexpr double kInf = std::numeric_limits<double>::infinity();

// exp(x) for x <= 0 in float64, written to vectorise: Cody-Waite reduction x = k ln2 + r (|r| <= ln2 / 2),
// the degree-13 Taylor polynomial of exp(r) (truncation below 5e-18 relative), 2^k from the exponent bits.
// Inputs below -708 give exp(-708) ~ 3e-308, invisible next to the running max's term of 1.
__attribute__((always_inline)) inline double exp_nonpos_f64(double x) {
  constexpr double kShift = 6755399441055744.0;  // 1.5 * 2^52: adding it rounds to an integer in the low bits
  x = x < -708.0 ? -708.0 : x;
  const double kd = x * 1.4426950408889634 + kShift;
  const double k = kd - kShift;
  const double r = (x - k * 6.93147180369123816490e-01) - k * 1.90821492927058770002e-10;
  double p = 1.0 / 6227020800.0;
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  const int64_t ki = __builtin_bit_cast(int64_t, kd) - __builtin_bit_cast(int64_t, kShift);
  return p * __builtin_bit_cast(double, (ki + 1023) << 52);
}

// d2[j] = max(qi + q[j] - 2 g[j] / (ni n[j]), 0) for j < len (r = 1 / n); *mn = min_j d2[j]; returns how many
// entries fall at or below the recompute threshold kc (qi + q[j]).
template <typename T>
INVFAST_ALWAYS_INLINE int64_t sqdist_impl(const T* g, const double* q, const double* r, double qi,
                                                          double ri, double kc, int64_t len, double* d2, double* mn) {
  int64_t close = 0;
  double lo = kInf;
#pragma omp simd reduction(+ : close) reduction(min : lo)
  for (int64_t j = 0; j < len; ++j) {
    double d = qi + q[j] - 2.0 * (ri * r[j]) * static_cast<double>(g[j]);
    d = d > 0.0 ? d : 0.0;
    d2[j] = d;
    close += d <= kc * (qi + q[j]) ? 1 : 0;
    lo = d < lo ? d : lo;
  }
  *mn = lo;
  return close;
}

// the loops compiled for x86-64-v3 and for the baseline; the core's ISA policy picks one (common/cpu_isa.h)
INVFAST_ISA_TWICE(template <typename T>, CpuIsa::kAvx2, INVFAST_V3, int64_t, sqdist,
                  (const T* g, const double* q, const double* r, double qi, double ri, double kc, int64_t len,
                   double* d2, double* mn),
                  (g, q, r, qi, ri, kc, len, d2, mn))

// sum_j exp(-scale d2[j] - m), m >= -scale min_j d2[j]
INVFAST_ALWAYS_INLINE double sum_exp_impl(const double* d2, int64_t len, double scale, double m) {
  double s = 0.0;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < len; ++j) s += exp_nonpos_f64(-scale * d2[j] - m);
  return s;
}
INVFAST_ISA_TWICE(, CpuIsa::kAvx2, INVFAST_V3, double, sum_exp, (const double* d2, int64_t len, double scale, double m),
                  (d2, len, scale, m))

// Per-row quantities of x and the error coefficients (see the header comment).
struct Rows {
  int64_t N = 0, D = 0;
  std::vector<double> n, r, q;  // divisor, its inverse, squared norm after the division
  double c = 0.0, kc = 0.0, qmax = 0.0;
};

// Also the input check for NaN/Inf (`op` names the op in the error): a row's sum of squares is not finite exactly
// when the row holds a NaN/Inf or, in float64, squares that overflow; only such rows are scanned. Checking here
// instead of with a torch op before the kernel saves each call a pass over x and, at more than one thread, a
// parallel region of torch's (which beside a busy process can stall the call, docs/performance.md).
template <typename T>
Rows row_data(const T* x, int64_t N, int64_t D, bool normalize, const char* op) {
  Rows p;
  p.N = N;
  p.D = D;
  p.n.assign(N, 1.0);
  p.r.assign(N, 1.0);
  p.q.assign(N, 0.0);
  // a few hundred thousand multiply-adds: one thread unless the rows are many
  const int64_t grain = std::max<int64_t>(256, (int64_t(1) << 20) / std::max<int64_t>(D, 1));
  std::atomic<bool> nonfinite{false};
  at::parallel_for(0, N, grain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const T* xi = x + i * D;
      double s = 0.0;
      for (int64_t k = 0; k < D; ++k) s += static_cast<double>(xi[k]) * static_cast<double>(xi[k]);
      if (!std::isfinite(s) && std::any_of(xi, xi + D, [](T v) { return !std::isfinite(v); }))
        nonfinite.store(true, std::memory_order_relaxed);
      if (normalize) {
        const double nr = std::max(std::sqrt(s), 1e-12);  // torch.nn.functional.normalize's eps
        p.n[i] = nr;
        p.r[i] = 1.0 / nr;
        s = s / (nr * nr);
      }
      p.q[i] = s;
    }
  });
  TORCH_CHECK(!nonfinite.load(), op, ": x contains NaN/Inf");
  const double u = std::is_same<T, float>::value ? std::ldexp(1.0, -24) : std::ldexp(1.0, -53);
  const double du = static_cast<double>(D) * u;
  TORCH_CHECK(du < 0.5, "pairwise ops: D = ", D, " is too large for an error bound in this precision");
  p.c = du / (1.0 - du) + std::ldexp(1.0, -48);
  p.kc = kKappa * p.c;
  p.qmax = p.q.empty() ? 0.0 : *std::max_element(p.q.begin(), p.q.end());
  return p;
}

template <typename T>
inline double exact_sqdist(const T* x, const Rows& p, int64_t i, int64_t j) {
  const T* a = x + i * p.D;
  const T* b = x + j * p.D;
  const double ni = p.n[i], nj = p.n[j];
  double s = 0.0;
  for (int64_t k = 0; k < p.D; ++k) {
    const double d = static_cast<double>(a[k]) / ni - static_cast<double>(b[k]) / nj;
    s += d * d;
  }
  return s;
}

// Squared distances of row i to columns [c, c + len) from its GEMM row g (entry 0 = column c), close pairs
// recomputed exactly; returns their minimum.
template <typename T>
double row_chunk(const T* x, const Rows& p, const T* g, int64_t i, int64_t c, int64_t len, double* d2) {
  double mn;
  const int64_t close = sqdist(g, p.q.data() + c, p.r.data() + c, p.q[i], p.r[i], p.kc, len, d2, &mn);
  if (close == 0) return mn;
  mn = kInf;
  for (int64_t j = 0; j < len; ++j) {
    if (d2[j] <= p.kc * (p.q[i] + p.q[c + j])) d2[j] = exact_sqdist(x, p, i, c + j);
    mn = std::min(mn, d2[j]);
  }
  return mn;
}

// f(s, rows, g, cols) for every block of rows [s, s + rows) of x, g = X[s : s + rows] X[c0 : N]^T ([rows, cols],
// c0 = s when `upper` (the block's upper triangle and beyond), else 0). The blocks are items of
// parallel::run_items_with: each thread takes the next block from a shared counter and computes its GEMM alone
// (BLAS runs one thread inside a parallel region), so a thread the OS deschedules (another process on the
// cores) delays the call by at most the block it holds, and no thread team forks and joins per block. The
// blocks of all threads together hold at most block_rows x N entries; a call under kMinParallelFlops runs on
// the calling thread. The blocks depend only on the thread count, never on whether the call forked.
constexpr double kMinParallelFlops = 1 << 22;

template <typename T, typename F>
void for_row_blocks(const at::Tensor& x, int64_t block_rows, bool upper, int64_t last, const F& f) {
  const int64_t N = x.size(0), D = x.size(1);
  const double flops = static_cast<double>(N) * static_cast<double>(N) * static_cast<double>(D);
  const int64_t threads = std::min<int64_t>(at::get_num_threads(), std::max<int64_t>(last, 1));
  const bool serial = threads <= 1 || flops < kMinParallelFlops || at::in_parallel_region();
  // several blocks per thread, so a late thread's share is taken by the others
  const int64_t per_thread = serial ? block_rows : std::max<int64_t>(1, block_rows / threads);
  const int64_t quarter = serial ? last : (last + 4 * threads - 1) / (4 * threads);
  const int64_t block = std::max<int64_t>(1, std::min({per_thread, last, quarter}));
  const int64_t nblocks = (last + block - 1) / block;
  parallel::run_items_with(
      nblocks, serial ? 0.0 : parallel::kAlwaysFork, [&] { return at::empty({block * N}, x.options()); },
      [&](int64_t b, at::Tensor& tile) {
        const int64_t s = b * block, rows = std::min(block, last - s), c0 = upper ? s : 0, cols = N - c0;
        auto g = tile.narrow(0, 0, rows * cols).view({rows, cols});
        at::mm_out(g, x.narrow(0, s, rows), x.narrow(0, c0, cols).t());
        f(s, rows, static_cast<const T*>(g.data_ptr<T>()), cols);
      });
}

void check_pairwise_input(const at::Tensor& x, const char* op, int64_t block_rows) {
  TORCH_CHECK(x.dim() == 2, op, ": x must be [N, D], got shape ", x.sizes());
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble, op,
              ": x must be float32 or float64, got ", x.scalar_type());
  TORCH_CHECK(x.size(1) >= 1, op, ": x must have D >= 1 features");
  TORCH_CHECK(block_rows >= 1, op, ": block_rows must be >= 1, got ", block_rows);
}

template <typename T>
double pairwise_lse_impl(const at::Tensor& x, double scale, bool normalize, int64_t block_rows) {
  const int64_t N = x.size(0), D = x.size(1);
  const T* xp = x.data_ptr<T>();
  const Rows p = row_data(xp, N, D, normalize, "pairwise_logsumexp");
  std::vector<double> row_m(N, -kInf), row_s(N, 0.0);
  for_row_blocks<T>(x, block_rows, true, N - 1, [&](int64_t s, int64_t rows, const T* gp, int64_t cols) {
    double buf[kChunk];
    for (int64_t ii = 0; ii < rows; ++ii) {
      const int64_t i = s + ii;
      const T* grow = gp + ii * cols;  // grow[j - s] = G_ij for j in [s, N)
      double m = -kInf, sum = 0.0;
      for (int64_t c = i + 1; c < N; c += kChunk) {
        const int64_t len = std::min(kChunk, N - c);
        const double cm = -scale * row_chunk(xp, p, grow + (c - s), i, c, len, buf);
        if (cm > m) {
          sum *= std::exp(m - cm);
          m = cm;
        }
        sum += sum_exp(buf, len, scale, m);
      }
      row_m[i] = m;
      row_s[i] = sum;
    }
  });
  double mx = -kInf;
  for (int64_t i = 0; i < N; ++i) mx = std::max(mx, row_m[i]);
  double total = 0.0;
  for (int64_t i = 0; i < N - 1; ++i) total += row_s[i] * std::exp(row_m[i] - mx);
  return mx + std::log(total);
}

at::Tensor pairwise_logsumexp_cpu(const at::Tensor& x_in, double scale, bool normalize, int64_t block_rows) {
  check_pairwise_input(x_in, "pairwise_logsumexp", block_rows);
  TORCH_CHECK(x_in.size(0) >= 2, "pairwise_logsumexp: x needs at least 2 rows, got ", x_in.size(0));
  TORCH_CHECK(std::isfinite(scale) && scale > 0.0, "pairwise_logsumexp: scale must be finite and > 0, got ", scale);
  const auto x = x_in.contiguous();
  const double v = x.scalar_type() == at::kFloat ? pairwise_lse_impl<float>(x, scale, normalize, block_rows)
                                                 : pairwise_lse_impl<double>(x, scale, normalize, block_rows);
  return at::full({}, v, x.options().dtype(at::kDouble));
}

// The k-th smallest of v[0, n) (1 <= k <= n). Small k: one pass keeping the k smallest in a sorted array
// (`buf`, k entries; a value enters only below the current k-th, rare after the first few hundred); large k:
// std::nth_element on a copy in `buf` (n entries).
double kth_smallest(const double* v, int64_t n, int64_t k, double* buf) {
  if (k <= 32) {
    std::fill(buf, buf + k, kInf);
    double kth = kInf;
    for (int64_t j = 0; j < n; ++j) {
      const double d = v[j];
      if (!(d < kth)) continue;
      int64_t t = k - 1;
      for (; t > 0 && buf[t - 1] > d; --t) buf[t] = buf[t - 1];
      buf[t] = d;
      kth = buf[k - 1];
    }
    return kth;
  }
  std::copy(v, v + n, buf);
  std::nth_element(buf, buf + (k - 1), buf + n);
  return buf[k - 1];
}

template <typename T>
void knn_impl(const at::Tensor& x, int64_t k, bool normalize, int64_t block_rows, double* od, int64_t* oi) {
  const int64_t N = x.size(0), D = x.size(1);
  const T* xp = x.data_ptr<T>();
  const Rows p = row_data(xp, N, D, normalize, "knn_sqdist");
  for_row_blocks<T>(x, block_rows, false, N, [&](int64_t s, int64_t rows, const T* gp, int64_t) {
    std::vector<double> d2(N), sel(N);
    std::vector<std::pair<double, int64_t>> cand;
    for (int64_t ii = 0; ii < rows; ++ii) {
      const int64_t i = s + ii;
      double mn;
      sqdist(gp + ii * N, p.q.data(), p.r.data(), p.q[i], p.r[i], 0.0, N, d2.data(), &mn);
      d2[i] = kInf;
      // every true k-nearest j has d~2_ij <= tau + 2 max_j E_ij (each distance moves by at most E)
      const double lim = kth_smallest(d2.data(), N, k, sel.data()) + 2.0 * p.c * (p.q[i] + p.qmax);
      cand.clear();
      for (int64_t j = 0; j < N; ++j)
        if (j != i && d2[j] <= lim) cand.emplace_back(exact_sqdist(xp, p, i, j), j);
      std::partial_sort(cand.begin(), cand.begin() + k, cand.end());  // by distance, then index
      for (int64_t t = 0; t < k; ++t) {
        od[i * k + t] = cand[t].first;
        oi[i * k + t] = cand[t].second;
      }
    }
  });
}

std::tuple<at::Tensor, at::Tensor> knn_sqdist_cpu(const at::Tensor& x_in, int64_t k, bool normalize,
                                                  int64_t block_rows) {
  check_pairwise_input(x_in, "knn_sqdist", block_rows);
  const int64_t N = x_in.size(0);
  TORCH_CHECK(k >= 1 && k <= N - 1, "knn_sqdist: k must be in [1, N - 1] = [1, ", N - 1, "], got ", k);
  const auto x = x_in.contiguous();
  auto dist = at::empty({N, k}, x.options().dtype(at::kDouble));
  auto idx = at::empty({N, k}, x.options().dtype(at::kLong));
  if (x.scalar_type() == at::kFloat)
    knn_impl<float>(x, k, normalize, block_rows, dist.data_ptr<double>(), idx.data_ptr<int64_t>());
  else
    knn_impl<double>(x, k, normalize, block_rows, dist.data_ptr<double>(), idx.data_ptr<int64_t>());
  return {dist, idx};
}

}  // namespace

TORCH_LIBRARY_IMPL(invfast, CPU, m) {
  m.impl("pairwise_logsumexp", &pairwise_logsumexp_cpu);
  m.impl("knn_sqdist", &knn_sqdist_cpu);
}

}  // namespace invfast
