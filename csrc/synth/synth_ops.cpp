// Schemas of the synthetic-data ops (Transforms-2D generation). Semantics: the torch references in
// invfast/ops/synth.py. All ops work per sample, so results never depend on the batch composition.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(invfast, m) {
  // obj float32 [B, 4, H, W] premultiplied RGBA in [0, 1], backgrounds uint8 [N, 3, H, W],
  // bg_index int64 [B] -> uint8 [B, 3, H, W]:
  //   round_half_even(clamp(backgrounds[bg_index[b]] * (1 - a) + rgb * 255, 0, 255)),
  // evaluated in float32 in exactly this order (bit-identical to the torch reference).
  m.def("synth_composite(Tensor obj, Tensor backgrounds, Tensor bg_index) -> Tensor");
  // Colour ops on the straight colour of obj (alpha kept); flags [B] int64 bitmask selects
  // 1 hue shift (hue [B]), 2 brightness, 4 contrast (alpha-weighted mean luma), 8 grayscale,
  // 16 posterize to posterize_bits, 32 invert, applied in this order. Returns premultiplied RGBA.
  m.def("synth_color(Tensor obj, Tensor hue, Tensor brightness, Tensor contrast, Tensor flags, int posterize_bits) -> Tensor");
  // Separable blur of x [B, C, H, W] with per-sample odd taps [B, K]; reflect padding where K/2 < min(H, W),
  // replicate otherwise. Horizontal pass first.
  m.def("synth_blur(Tensor x, Tensor taps) -> Tensor");
  // Bilinear affine warp (zeros outside, align_corners=False): output pixel p samples x at
  // inv @ (p - offset) in normalised [-1, 1] coordinates; inv [B, 2, 2], offset [B, 2] float32.
  // premultiplied=True promises x is premultiplied RGBA (C == 4, colour 0 wherever alpha is 0): pixels
  // whose alpha taps are all 0 are then written as 0 without reading the colour (same result).
  m.def("synth_warp(Tensor x, Tensor inv, Tensor offset, bool premultiplied=False) -> Tensor");
}
