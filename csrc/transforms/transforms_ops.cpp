// Schemas of the transforms op family: uint8 kernels of the test transforms, every image through every
// parameter in one call. Each output is [B, P, C, H, W] uint8 (the images' size kept) unless stated; the torch
// references in invfast/ops/transforms_u8.py define the semantics.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(invfast, m) {
  // images [B, C, H, W] uint8, tables [Bt, P, Ct, 256] uint8 (Bt in {1, B}, Ct in {1, C}):
  // out[b, p, c] = tables[b or 0, p, c or 0][images[b, c]] (brightness, contrast, posterize, invert, equalize)
  m.def("lut_u8(Tensor images, Tensor tables) -> Tensor");
  // images [B, C, H, W] uint8 -> int64 [B, C, 256]: the count of every level in every plane
  m.def("histogram_u8(Tensor images) -> Tensor");
  // images [B, 3, H, W] uint8, factors [P] float32: torchvision's blend f x + (1 - f) d in float32, with the
  // degenerate image d = 'luma' (saturation), 'luma_levels' (luma rounded to levels: grayscale, f = 1 - flag)
  // or 'smooth_levels' (PIL SMOOTH rounded to levels, the border kept: sharpness)
  m.def("blend_u8(Tensor images, Tensor factors, str degenerate) -> Tensor");
  // images [B, 3, H, W] uint8, shifts [P] float32 in [-0.5, 0.5]: torchvision adjust_hue in float32
  m.def("hue_u8(Tensor images, Tensor shifts) -> Tensor");
  // images [B, C, H, W] uint8, taps [P, 2R + 1] float32 (symmetric rows, R < H and R < W): separable blur,
  // reflect padding, every row of taps horizontally then vertically
  m.def("blur_u8(Tensor images, Tensor taps) -> Tensor");
  // images [B, C, H, W] uint8, matrix [P, 2, 3] float64 (output pixel (x, y) samples the source at
  // matrix[p] @ (x, y, 1), pixel-centre units), fill [C] float64 in 0..255: bilinear, rounded half up;
  // integer maps copy pixels exactly (fill rounded half up)
  m.def("warp_affine_u8(Tensor images, Tensor matrix, Tensor fill) -> Tensor");
}
