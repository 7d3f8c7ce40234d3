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
  // u [B, V, U] (images, views, units; float32 or float64) -> float64 (mean [B, U], M2 [B, U]) over each
  // image's views and (mean [V, U], M2 [V, U]) over each view's images, M2 the sum of squared deviations from
  // the mean (two passes). The per-unit moments of invfast.measure.units in one read of the activations.
  m.def("unit_moments(Tensor u) -> (Tensor, Tensor, Tensor, Tensor)");
}
