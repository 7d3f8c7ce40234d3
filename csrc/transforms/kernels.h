// Raw-pointer kernels of the uint8 test transforms (the ATen wrappers are in transforms_cpu.cpp).
//
// These files include no torch header: their hot loops are compiled twice on x86-64 (baseline and an AVX2
// variant chosen at run time), and an inline torch function compiled for AVX2 must never be linked into
// code that runs on a CPU without it. Every function here works on one image (or one chunk of one image);
// the wrappers spread images x parameters over threads.
//
// Layouts: an image is C contiguous planes [C][H][W] of uint8; an output block of one image is [P][C][H][W]
// (one image, every parameter) or [C][H][W] (one image, one parameter).
#pragma once

#include <cstdint>

namespace invfast {
namespace tt {

// ---------------------------------------------------------------------------- 256-entry tables
// A table t with t[i] == ((i & mask) ^ bits) for every i (identity, invert, posterize) is applied with
// byte-wide logic; any other table by lookup.
struct LutKind {
  bool bitwise;
  uint8_t mask, bits;
};
LutKind classify_lut(const uint8_t* table);
void lut_plane(const uint8_t* src, int64_t n, const uint8_t* table, LutKind kind, uint8_t* dst);
// hist[256] += counts of the n bytes of src
void histogram_plane(const uint8_t* src, int64_t n, int64_t* hist);

// ---------------------------------------------------------------------------- point-wise colour
// Blend of an RGB image with a degenerate image, torchvision's `_blend` evaluated in float32 exactly as the
// torch reference does: out = u8(clamp(f * x + (1 - f) * d, 0, 1)), x = v / 255, u8(y) = trunc(clamp(y * 255
// + 0.5, 0, 255)). Degenerate images:
enum BlendMode : int {
  kLuma = 0,          // d = luma (0.2989 r + 0.587 g + 0.114 b): saturation
  kLumaLevels = 1,    // d = round_half_even(255 luma) / 255: grayscale (factor 1 - flag)
  kSmoothLevels = 2,  // d = PIL SMOOTH (3x3, centre 5, / 13) rounded to levels inside, x on the border: sharpness
};
// Pixels [i0, i1) (row-major) of one RGB image `img` [3][H][W] through every factor; out: this image's
// [P][3][H][W]. scratch: 6 * (i1 - i0) floats.
void blend_chunk(const uint8_t* img, int64_t H, int64_t W, int64_t i0, int64_t i1, int mode, const float* factors,
                 int64_t P, uint8_t* out, float* scratch);
// torchvision adjust_hue (RGB -> HSV, h <- (h + shift) mod 1, HSV -> RGB) in float32 as the torch reference
// evaluates it, pixels [i0, i1) of `img` [3][HW] through every shift; scratch: 3 * (i1 - i0) floats.
void hue_chunk(const uint8_t* img, int64_t HW, int64_t i0, int64_t i1, const float* shifts, int64_t P, uint8_t* out,
               float* scratch);

// ---------------------------------------------------------------------------- separable blur
// One plane through the symmetric taps w[0..R] (w[0] the centre; w[k] for offsets +-k), reflect padding
// (needs R < H and R < W), float32 accumulation on 0..255 values, rounded half up.
// scratch: blur_scratch_floats(H, W, R) floats.
int64_t blur_scratch_floats(int64_t H, int64_t W, int64_t R);
void blur_plane(const uint8_t* src, int64_t H, int64_t W, const float* w, int64_t R, uint8_t* dst, float* scratch);

// ---------------------------------------------------------------------------- affine warp (same size)
// Output pixel (x, y) samples the source at (m0 x + m1 y + m2, m3 x + m4 y + m5) (pixel-centre units).
enum MapKind : int {
  kGeneral = 0,     // bilinear, coordinates computed once per row and reused for every plane
  kSeparable = 1,   // axis-aligned with |m4| <= 1: rows interpolated once horizontally, then vertically
  kCopy = 2,        // integer map, linear part diag(+-1, +-1): row copies (flips, integer shifts)
  kTransposed = 3,  // integer map, linear part [[0, +-1], [+-1, 0]]: tiled transposition (90-degree rotations)
};
int classify_map(const double* m);
// Source planes padded by 2 pixels of fill on every side: [C][H + 4][W + 4] plus 4 trailing bytes (the AVX2
// path reads 4 bytes at each neighbour). Element type uint8 (fill a level) or float (any fill).
int64_t padded_elems(int64_t C, int64_t H, int64_t W);
void pad_planes(const uint8_t* img, int64_t C, int64_t H, int64_t W, const uint8_t* fill, uint8_t* padded);
void pad_planes(const uint8_t* img, int64_t C, int64_t H, int64_t W, const double* fill, float* padded);
// n consecutive images (C planes each) through one map: image i is img + i C H W (unpadded, for the copies),
// padded + i pstride (its padded planes, for the bilinear kinds), into out + i ostride [C][H][W];
// `fill_level` is the rounded fill of the copies. kGeneral computes each row's coordinates once for all n
// images. scratch: warp_scratch_floats(W).
int64_t warp_scratch_floats(int64_t W);
void warp_images(const uint8_t* img, const uint8_t* padded, int64_t n, int64_t pstride, int64_t C, int64_t H, int64_t W,
                 const double* m, int kind, const uint8_t* fill_level, uint8_t* out, int64_t ostride, float* scratch);
void warp_images(const uint8_t* img, const float* padded, int64_t n, int64_t pstride, int64_t C, int64_t H, int64_t W,
                 const double* m, int kind, const uint8_t* fill_level, uint8_t* out, int64_t ostride, float* scratch);

}  // namespace tt
}  // namespace invfast
