// Schemas of the all-pairs invariance ops (uniformity, ACR). The older per-row ops (pair_scores,
// sqdist_logsumexp) are declared in csrc/ops.cpp.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(invfast, m) {
  // x [N, D] (float32 or float64) -> float64 scalar: log sum_{i < j} exp(-scale * ||x^_i - x^_j||^2), where
  // x^ = x / ||x|| (norms in float64) when normalize, x otherwise. One GEMM per block of block_rows rows
  // against the rows after it (the upper triangle only), in the dtype of x; squared distances and the
  // log-sum-exp in float64; pairs whose GEMM distance could have lost more than 1/256 of its value to
  // cancellation are recomputed exactly in float64. Memory O(block_rows * N).
  m.def("pairwise_logsumexp(Tensor x, float scale, bool normalize, int block_rows) -> Tensor");
  // x [N, D] -> (sqdist [N, k] float64, index [N, k] int64): the k nearest other rows of every row, by
  // squared Euclidean distance of x^ (as above), ascending, ties by the lower index; exact in float64
  // (candidates from one GEMM per block, their distances recomputed exactly). Memory O(block_rows * N).
  m.def("knn_sqdist(Tensor x, int k, bool normalize, int block_rows) -> (Tensor, Tensor)");
  // u [B, V, U] (images, views, units; float32 or float64): the float64 mean and M2 (sum of squared deviations
  // from the mean, two passes) of every unit over each image's views, merged in place into the running
  // mean_v, m2_v [B, U] of n_v views before, and over each view's images, merged into mean_b, m2_b [V, U] of
  // n_b images before (a count of 0 overwrites). The per-unit moments of invfast.measure.units in one read.
  m.def("merge_unit_moments_(Tensor u, Tensor(a!) mean_v, Tensor(b!) m2_v, int n_v, Tensor(c!) mean_b, "
        "Tensor(d!) m2_b, int n_b) -> ()");
}
