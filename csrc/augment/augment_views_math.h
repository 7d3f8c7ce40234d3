// Per-pixel maths of the fused policy-view op `augment_views`, shared verbatim by the CPU kernel
// (augment_views_cpu.cpp) and the CUDA kernels (augment_cuda.cu): the CPU build therefore tests the
// exact functions the GPU runs. Float images in [0, 1]; the definitions follow the torch path
// (invfast/transforms/functional.py, invfast/ops/color.py): torchvision's ColorJitter maths in float32,
// bilinear sampling with zero outside (per neighbour), reflect-padded separable Gaussian blur.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/color.h"

namespace invfast {
namespace augment {
namespace views {

enum JitterOp : int64_t { kBrightness = 0, kContrast = 1, kSaturation = 2, kHue = 3 };

using color::clamp01;
using color::luma;

IVF_HD float to_unit(uint8_t v) { return static_cast<float>(v) / 255.0f; }
IVF_HD float to_unit(float v) { return v; }

// torch.remainder for a positive divisor (its vectorised form a - m floor(a / m)): the result is in [0, m).
// Cheaper than fmodf, which dominated the per-pixel cost of the hue rotation.
IVF_HD float remainder_pos(float a, float m) {
  const float r = a - m * floorf(a / m);
  return r < m ? r : 0.f;
}

// Bilinear sample of the three channels of `src` ([3, H, W], contiguous) at source point (sx, sy) in
// pixel-centre units; neighbours outside the image contribute 0 with their bilinear weight.
template <typename T>
IVF_HD void sample_rgb(const T* src, int64_t H, int64_t W, float sx, float sy, float rgb[3]) {
  float x0f = floorf(sx), y0f = floorf(sy);
  const float fx = sx - x0f, fy = sy - y0f;
  // far outside: clamp before the integer conversion (every neighbour is outside anyway)
  x0f = fmaxf(-2.f, fminf(x0f, static_cast<float>(W) + 1.f));
  y0f = fmaxf(-2.f, fminf(y0f, static_cast<float>(H) + 1.f));
  const int64_t x0 = static_cast<int64_t>(x0f), y0 = static_cast<int64_t>(y0f);
  const bool vx0 = x0 >= 0 && x0 < W, vx1 = x0 + 1 >= 0 && x0 + 1 < W;
  const bool vy0 = y0 >= 0 && y0 < H, vy1 = y0 + 1 >= 0 && y0 + 1 < H;
  const int64_t plane = H * W;
  for (int c = 0; c < 3; ++c) {
    const T* s = src + c * plane;
    const float v00 = (vy0 && vx0) ? to_unit(s[y0 * W + x0]) : 0.f;
    const float v01 = (vy0 && vx1) ? to_unit(s[y0 * W + x0 + 1]) : 0.f;
    const float v10 = (vy1 && vx0) ? to_unit(s[(y0 + 1) * W + x0]) : 0.f;
    const float v11 = (vy1 && vx1) ? to_unit(s[(y0 + 1) * W + x0 + 1]) : 0.f;
    const float top = v00 + fx * (v01 - v00);
    const float bot = v10 + fx * (v11 - v10);
    rgb[c] = top + fy * (bot - top);
  }
}

// ratio * a + (1 - ratio) * b, clamped (torchvision _blend)
IVF_HD void blend_with(float rgb[3], float other, float ratio) {
  const float q = 1.0f - ratio;
  for (int c = 0; c < 3; ++c) rgb[c] = clamp01(ratio * rgb[c] + q * other);
}

// Hue rotation by `shift` (fraction of the circle) through HSV, torchvision's _rgb2hsv / _hsv2rgb.
IVF_HD void adjust_hue(float rgb[3], float shift) {
  const color::Hsv hsv = color::hsv_from_rgb(rgb[0], rgb[1], rgb[2]);
  const float h = remainder_pos(hsv.h + shift, 1.0f);
  const float vs = hsv.v * hsv.s;
  const float ns[3] = {5.0f, 3.0f, 1.0f};
  for (int c = 0; c < 3; ++c) rgb[c] = clamp01(color::hue_channel(h, ns[c], hsv.v, vs));
}

// One ColorJitter op; `gray_mean` is the image's mean luma at this point of the chain (contrast only).
IVF_HD void jitter_op(int64_t op, float f, float gray_mean, float rgb[3]) {
  if (op == kBrightness) {
    for (int c = 0; c < 3; ++c) rgb[c] = clamp01(rgb[c] * f);
  } else if (op == kContrast) {
    blend_with(rgb, gray_mean, f);
  } else if (op == kSaturation) {
    blend_with(rgb, luma(rgb[0], rgb[1], rgb[2]), f);
  } else {
    adjust_hue(rgb, f);
  }
}

// The ops of a sample's jitter that come before contrast in its order: everything the contrast's
// per-image mean depends on. Applies them to `rgb` and returns true when contrast is in the order.
IVF_HD bool jitter_prefix(const int64_t* order, const float* factors, float rgb[3]) {
  for (int step = 0; step < 4; ++step) {
    const int64_t op = order[step];
    if (op == kContrast) return true;
    jitter_op(op, factors[op], 0.f, rgb);
  }
  return false;
}

// The pointwise chain after the warp: jitter in the sample's order (contrast with the precomputed mean),
// then grayscale.
IVF_HD void colour_chain(bool jitter, const int64_t* order, const float* factors, float gray_mean, bool gray,
                         float rgb[3]) {
  if (jitter)
    for (int step = 0; step < 4; ++step) jitter_op(order[step], factors[order[step]], gray_mean, rgb);
  if (gray) {
    const float l = luma(rgb[0], rgb[1], rgb[2]);
    rgb[0] = rgb[1] = rgb[2] = l;
  }
}

// Solarize then normalise one value of channel c.
IVF_HD float epilogue(float v, bool solarize, float threshold, float mean, float inv_std_or_std) {
  if (solarize && v >= threshold) v = 1.0f - v;
  return (v - mean) / inv_std_or_std;
}

// Gaussian radius of scipy's rule int(3 sigma + 0.5), cut at max_radius (torch path: gaussian_kernels).
IVF_HD int64_t blur_radius(double sigma, int64_t max_radius) {
  int64_t r = static_cast<int64_t>(floor(3.0 * sigma + 0.5));
  if (r > max_radius) r = max_radius;
  return r < 0 ? 0 : r;
}

// Unnormalised tap t (|t| <= radius) of the Gaussian of std sigma.
IVF_HD double gauss_tap(double sigma, int64_t t) {
  const double s = sigma > 1e-12 ? sigma : 1e-12;
  const double z = static_cast<double>(t) / s;
  return exp(-0.5 * z * z);
}

// Reflect padding index (torch F.pad mode='reflect', edge not repeated); requires radius < n.
IVF_HD int64_t reflect(int64_t i, int64_t n) {
  if (i < 0) return -i;
  if (i >= n) return 2 * (n - 1) - i;
  return i;
}

}  // namespace views
}  // namespace augment
}  // namespace invfast
