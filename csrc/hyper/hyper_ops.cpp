// Schemas of the batched hypernetwork weight-generation ops (Hyper-ResNet, SPEC §3).
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(invfast, m) {
  // hidden [B, L, H] (hidden vector of kernel l for descriptor b), weight [N, H] and bias [N]
  // (packed output layers of the L per-kernel hypernetworks; kernel l owns rows
  // offsets[l] .. offsets[l+1]) -> [B, N]: every generated kernel, flat, in conv weight layout.
  m.def("hyper_generate(Tensor hidden, Tensor weight, Tensor bias, int[] offsets) -> Tensor");
  // grad [B, N] -> (grad_hidden [B, L, H], grad_weight [N, H], grad_bias [N]).
  m.def("hyper_generate_backward(Tensor grad, Tensor hidden, Tensor weight, int[] offsets) -> (Tensor, Tensor, Tensor)");
}
