// Schemas of the augment op family (batched image warps for the test transforms).
#include <torch/library.h>

#ifndef INVFAST_AUGMENT_NS
#define INVFAST_AUGMENT_NS invfast
#endif

TORCH_LIBRARY_FRAGMENT(INVFAST_AUGMENT_NS, m) {
  // images [B, C, H, W] (uint8, float32, float64), matrix [P, 2, 3] (float64; output pixel (x, y) samples
  // the source at (m00 x + m01 y + m02, m10 x + m11 y + m12), pixel-centre units), fill [C] in image units
  // -> [B, P, C, out_h, out_w] in the images' dtype; bilinear, uint8 rounded half up.
  m.def("warp_affine(Tensor images, Tensor matrix, int out_h, int out_w, Tensor fill) -> Tensor");
}
