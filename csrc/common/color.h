// The colour maths every compiled kernel shares, CPU and CUDA: the luma weights of
// invfast.constants.LUMA_WEIGHTS (ITU-R 601-2, as torchvision's rgb_to_grayscale) rounded to float32, as torch
// rounds a Python float multiplying a float32 plane (tests/test_primitives.py checks them against the
// constants), luma, and torchvision's _rgb2hsv / adjust_hue in float32 in the order of invfast.ops.color.
#pragma once

#include <algorithm>

#ifndef IVF_HD
#ifdef __CUDACC__
#define IVF_HD __host__ __device__ __forceinline__
#else
#define IVF_HD inline
#endif
#endif

namespace invfast {
namespace color {

constexpr float kLumaR = 0.2989f, kLumaG = 0.587f, kLumaB = 0.114f;

// ITU-R 601-2 luma of an RGB triple in [0, 1] (or [0, 255]: the weights are linear)
IVF_HD float luma(float r, float g, float b) { return kLumaR * r + kLumaG * g + kLumaB * b; }

IVF_HD float clamp01(float v) { return v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v); }

// floor for |x| < 2^22 without a libm call (vectorisable with plain SSE2); exact
IVF_HD float floor_small(float x) {
  const float t = static_cast<float>(static_cast<int>(x));
  return t > x ? t - 1.0f : t;
}

// torchvision _rgb2hsv's hue in [0, 1) for r, g, b in [0, 1]. The reference sums mask * term over three
// masks of which one is set; the selected term is that sum but for the sign of a zero, which t / 6 + 1 does
// not see.
IVF_HD float hue_of(float r, float g, float b) {
  const float maxc = std::max(std::max(r, g), b), minc = std::min(std::min(r, g), b);
  const float crd = maxc == minc ? 1.0f : maxc - minc;
  const float rc = (maxc - r) / crd, gc = (maxc - g) / crd, bc = (maxc - b) / crd;
  const float t = maxc == r ? bc - gc : (maxc == g ? (2.0f + rc) - bc : (4.0f + gc) - rc);
  const float u = t / 6.0f + 1.0f;  // in [5/6, 11/6]: fmod(u, 1) is u - 1 (exact) or u
  return u >= 1.0f ? u - 1.0f : u;
}

// torchvision _rgb2hsv's saturation for r, g, b in [0, 1]
IVF_HD float saturation_of(float r, float g, float b) {
  const float maxc = std::max(std::max(r, g), b), minc = std::min(std::min(r, g), b);
  return (maxc - minc) / (maxc == minc ? 1.0f : maxc);
}

struct Hsv {
  float h, s, v;  // hue in [0, 1), saturation and value in [0, 1]
};

IVF_HD Hsv hsv_from_rgb(float r, float g, float b) {
  return Hsv{hue_of(r, g, b), saturation_of(r, g, b), std::max(std::max(r, g), b)};
}

// Channel n (5, 3, 1 for r, g, b) of torchvision's _hsv2rgb (closed form, invfast.ops.color.hsv_to_rgb) at
// the rotated hue h in [0, 1]: v - v s clamp(min(k, 4 - k), 0, 1) with k = (6 h + n) mod 6, the remainder one
// subtraction (exact, as 6 h + n < 12); vs = v s. Unclamped: callers clamp or round as their reference does.
IVF_HD float hue_channel(float h, float n, float v, float vs) {
  float k = h * 6.0f + n;
  k = k >= 6.0f ? k - 6.0f : k;
  return v - vs * std::min(std::max(std::min(k, 4.0f - k), 0.0f), 1.0f);
}

// torchvision's _hsv2rgb (sector form, invfast.ops.color.hsv_to_rgb(sectors=True)) for h in [0, 1): the
// sector i = floor(6 h) (6 only where 6 h rounds up to 6, the same as 0) picks (r, g, b) from (v, q, p, t).
// Selects instead of branches, so a loop over pixels vectorises.
IVF_HD void hsv_to_rgb_sectors(float h, float s, float v, float rgb[3]) {
  const float i = floor_small(h * 6.0f);
  const float f = h * 6.0f - i;
  const float p = clamp01(v * (1.0f - s));
  const float q = clamp01(v * (1.0f - s * f));
  const float t = clamp01(v * (1.0f - s * (1.0f - f)));
  const bool i0 = (i == 0.0f) | (i == 6.0f), i1 = i == 1.0f, i2 = i == 2.0f, i3 = i == 3.0f, i4 = i == 4.0f,
             i5 = i == 5.0f;
  rgb[0] = (i0 | i5) ? v : (i1 ? q : ((i2 | i3) ? p : t));
  rgb[1] = i0 ? t : ((i1 | i2) ? v : (i3 ? q : p));
  rgb[2] = (i0 | i1) ? p : (i2 ? t : ((i3 | i4) ? v : q));
}

}  // namespace color
}  // namespace invfast
