// Schemas of the synthetic-data ops (Transforms-2D generation).
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(invfast, m) {
  // obj float32 [B, 4, H, W] premultiplied RGBA in [0, 1], backgrounds uint8 [N, 3, H, W],
  // bg_index int64 [B] -> uint8 [B, 3, H, W]:
  //   round_half_even(clamp(backgrounds[bg_index[b]] * (1 - a) + rgb * 255, 0, 255)),
  // evaluated in float32 in exactly this order (bit-identical to the torch reference).
  m.def("synth_composite(Tensor obj, Tensor backgrounds, Tensor bg_index) -> Tensor");
}
