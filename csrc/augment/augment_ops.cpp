// Schemas of the augment op family (batched image warps for the test transforms, fused policy views).
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(invfast, m) {
  // images [B, C, H, W] (uint8, float32, float64), matrix [P, 2, 3] (float64; output pixel (x, y) samples
  // the source at (m00 x + m01 y + m02, m10 x + m11 y + m12), pixel-centre units), fill [C] in image units
  // -> [B, P, C, out_h, out_w] in the images' dtype; bilinear, uint8 rounded half up.
  m.def("warp_affine(Tensor images, Tensor matrix, int out_h, int out_w, Tensor fill) -> Tensor");
  // images [B, C, H, W] (uint8, float32, float64), coords [P, Ho, Wo, 2] (source x, y of every output pixel,
  // pixel-centre units; a displacement field added to the identity, e.g. the elastic `deform`), fill [C]
  // -> [B, P, C, Ho, Wo]; bilinear with the same fill and rounding rules as warp_affine.
  m.def("warp_coords(Tensor images, Tensor coords, Tensor fill) -> Tensor");
  // One augmented view per image (a pretraining policy, fused): images [B, 3, H, W] uint8 (0..255) or float
  // (0..1); matrix [B, 2, 3] (crop + resize + flip as one bilinear map, zero outside); then, per image,
  // ColorJitter (jitter [B] bool, factors [B, 4] = brightness, contrast, saturation, hue shift, applied in
  // the order [B, 4] permutation of 0..3), grayscale [B], Gaussian blur [B] with sigma [B] px (reflect
  // padding, radius int(3 sigma + 0.5)), solarize [B] (v >= threshold -> 1 - v), normalisation
  // (v - mean[c]) / std[c]. Optional masks None switch the stage off for every image.
  // -> [B, 3, out_h, out_w] in `dtype` (float32 or bfloat16), channels_last memory when asked.
  m.def("augment_views(Tensor images, Tensor matrix, int out_h, int out_w, Tensor? jitter, Tensor factors, "
        "Tensor order, Tensor? grayscale, Tensor? blur, Tensor sigma, Tensor? solarize, float threshold, "
        "Tensor mean, Tensor std, ScalarType dtype, bool channels_last) -> Tensor");
}
