// Point-wise kernels of the uint8 test transforms: 256-entry tables, histograms, blends with a degenerate
// image (saturation, grayscale, sharpness) and hue rotation. The float kernels repeat the torch reference's
// float32 operations in the same order (x = v / 255, no fused multiply-add), so their bytes equal it.
#include "common/color.h"
#include "transforms/kernels.h"
#include "transforms/simd.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/no_fp_contract.h"  // after every other include

namespace invfast {
namespace tt {

namespace {

// v / 255 in float32: torch's uint8 -> float (`to(float32).div_(255.0)`), a true division (a product with
// 1 / 255 differs in the last bit for half of the levels)
TT_INLINE float unit(uint8_t v) { return static_cast<float>(v) / 255.0f; }

// invfast.transforms.functional.from_float of a value the reference has clamped to [0, 1]
TT_INLINE uint8_t to_u8(float y) {
  y = std::min(std::max(y, 0.0f), 1.0f);
  y = y * 255.0f + 0.5f;
  y = std::min(std::max(y, 0.0f), 255.0f);
  return static_cast<uint8_t>(static_cast<int32_t>(y));
}

// ------------------------------------------------------------------------------------------ tables
TT_INLINE void lut_plane_impl(const uint8_t* src, int64_t n, const uint8_t* table, LutKind kind, uint8_t* dst) {
  if (kind.bitwise) {
    if (kind.mask == 0xFF && kind.bits == 0) {
      std::memcpy(dst, src, static_cast<size_t>(n));
      return;
    }
    const uint8_t m = kind.mask, b = kind.bits;
    for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<uint8_t>((src[i] & m) ^ b);
    return;
  }
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {  // one 8-byte load and store per 8 lookups
    uint64_t w, o = 0;
    std::memcpy(&w, src + i, 8);
    for (int k = 0; k < 8; ++k) o |= static_cast<uint64_t>(table[(w >> (8 * k)) & 0xFF]) << (8 * k);
    std::memcpy(dst + i, &o, 8);
  }
  for (; i < n; ++i) dst[i] = table[src[i]];
}
TT_TWICE(TT_AVX2, void, lut_plane, (const uint8_t* src, int64_t n, const uint8_t* table, LutKind kind, uint8_t* dst),
         (src, n, table, kind, dst))

// ------------------------------------------------------------------------------------------ blend
// x planes (3 * n floats) and the degenerate plane(s) d (n floats, or 3 * n for kSmoothLevels) of pixels
// [i0, i1) of one image
TT_INLINE void blend_features(const uint8_t* img, int64_t H, int64_t W, int64_t i0, int64_t i1, int mode, float* x,
                              float* d) {
  const int64_t HW = H * W, n = i1 - i0;
  for (int c = 0; c < 3; ++c)
    for (int64_t i = 0; i < n; ++i) x[c * n + i] = unit(img[c * HW + i0 + i]);
  if (mode == kLuma) {
    for (int64_t i = 0; i < n; ++i) d[i] = color::luma(x[i], x[n + i], x[2 * n + i]);
    return;
  }
  if (mode == kLumaLevels) {  // round() is half-to-even in torch and in nearbyint (default rounding mode)
    for (int64_t i = 0; i < n; ++i)
      d[i] = std::nearbyint(color::luma(x[i], x[n + i], x[2 * n + i]) * 255.0f) / 255.0f;
    return;
  }
  // kSmoothLevels: round(255 * smooth) = round(S / 13) with S the integer 3x3 sum (centre weight 5), never a
  // tie (S / 13 is at least 1/26 away from a half level), so the integer form equals the float reference's
  for (int c = 0; c < 3; ++c) {
    const uint8_t* s = img + c * HW;
    float* dc = d + c * n;
    for (int64_t i = i0; i < i1;) {
      const int64_t y = i / W, x0 = i % W, x1 = std::min<int64_t>(W, x0 + (i1 - i));
      const bool border_row = y == 0 || y == H - 1;
      for (int64_t xx = x0; xx < x1; ++xx) {
        const int64_t k = y * W + xx;
        if (border_row || xx == 0 || xx == W - 1) {
          dc[k - i0] = x[c * n + (k - i0)];
        } else {
          const uint8_t* u = s + k - W;
          const uint8_t* m = s + k;
          const uint8_t* w = s + k + W;
          const int32_t S = u[-1] + u[0] + u[1] + m[-1] + 5 * m[0] + m[1] + w[-1] + w[0] + w[1];
          dc[k - i0] = unit(static_cast<uint8_t>((2 * S + 13) / 26));
        }
      }
      i += x1 - x0;
    }
  }
}

// f = 1 gives 1 x + 0 d = x exactly, whose level is the input byte; f = 0 gives d, the same plane for every
// channel when d is shared: those parameters (the on/off grayscale grid, identities) copy bytes
TT_INLINE void blend_out(const uint8_t* img, const float* x, const float* d, int64_t n, bool per_channel_d,
                         const float* factors, int64_t P, int64_t HW, int64_t i0, uint8_t* out) {
  for (int64_t p = 0; p < P; ++p) {
    const float f = factors[p], g = 1.0f - f;
    for (int c = 0; c < 3; ++c) {
      const float* xc = x + c * n;
      const float* dc = per_channel_d ? d + c * n : d;
      uint8_t* o = out + (p * 3 + c) * HW + i0;
      if (f == 1.0f) {
        std::memcpy(o, img + c * HW + i0, static_cast<size_t>(n));
      } else if (f == 0.0f && !per_channel_d && c > 0) {
        std::memcpy(o, out + (p * 3) * HW + i0, static_cast<size_t>(n));
      } else {
        for (int64_t i = 0; i < n; ++i) o[i] = to_u8(f * xc[i] + g * dc[i]);
      }
    }
  }
}

// round_half_even(255 luma) of n pixels as bytes: grayscale's image. The blend at f = 0 gives 0 x + 1 d = d
// = level / 255 exactly and u8(level / 255) = level for every level (checked for all 256), so these are its
// bytes; one fused pass with no float planes in memory.
TT_INLINE void luma_levels_u8(const uint8_t* R, const uint8_t* G, const uint8_t* B, int64_t n, uint8_t* o) {
  for (int64_t i = 0; i < n; ++i) {
    const float y = color::luma(unit(R[i]), unit(G[i]), unit(B[i])) * 255.0f;
    o[i] = static_cast<uint8_t>(static_cast<int32_t>(std::nearbyint(y)));
  }
}

TT_INLINE bool on_off(const float* factors, int64_t P) {
  for (int64_t p = 0; p < P; ++p)
    if (factors[p] != 0.0f && factors[p] != 1.0f) return false;
  return true;
}

TT_INLINE void blend_chunk_impl(const uint8_t* img, int64_t H, int64_t W, int64_t i0, int64_t i1, int mode,
                                const float* factors, int64_t P, uint8_t* out, float* scratch) {
  const int64_t n = i1 - i0;
  if (mode == kLumaLevels && on_off(factors, P)) {  // grayscale's grid: input bytes or gray bytes, copied
    const int64_t HW = H * W;
    uint8_t* gray = reinterpret_cast<uint8_t*>(scratch);  // n bytes of the 6 n floats
    luma_levels_u8(img + i0, img + HW + i0, img + 2 * HW + i0, n, gray);
    for (int64_t p = 0; p < P; ++p)
      for (int c = 0; c < 3; ++c)
        std::memcpy(out + (p * 3 + c) * HW + i0, factors[p] == 1.0f ? img + c * HW + i0 : gray,
                    static_cast<size_t>(n));
    return;
  }
  float* x = scratch;
  float* d = scratch + 3 * n;
  blend_features(img, H, W, i0, i1, mode, x, d);
  blend_out(img, x, d, n, mode == kSmoothLevels, factors, P, H * W, i0, out);
}
TT_TWICE(TT_AVX2, void, blend_chunk,
         (const uint8_t* img, int64_t H, int64_t W, int64_t i0, int64_t i1, int mode, const float* factors,
          int64_t P, uint8_t* out, float* scratch),
         (img, H, W, i0, i1, mode, factors, P, out, scratch))

// ------------------------------------------------------------------------------------------ hue
// torchvision _rgb2hsv in float32: h (color::hue_of), v s (color::saturation_of times v) and v, the largest
// byte. Each loop stores one array (GCC does not vectorise a loop storing to several arrays a run-time distance
// apart).
TT_INLINE void hsv_features(const uint8_t* img, int64_t HW, int64_t i0, int64_t n, float* h, float* vs, float* v) {
  const uint8_t* R = img + i0;
  const uint8_t* G = img + HW + i0;
  const uint8_t* B = img + 2 * HW + i0;
  for (int64_t i = 0; i < n; ++i) h[i] = color::hue_of(unit(R[i]), unit(G[i]), unit(B[i]));
  for (int64_t i = 0; i < n; ++i) v[i] = unit(std::max(std::max(R[i], G[i]), B[i]));
  for (int64_t i = 0; i < n; ++i) vs[i] = v[i] * color::saturation_of(unit(R[i]), unit(G[i]), unit(B[i]));
}

// channel `add` (5, 3, 1 for r, g, b) of the shifted hue (color::hue_channel)
TT_INLINE void hue_plane(const float* h, const float* vs, const float* v, int64_t n, float shift, float add,
                         uint8_t* o) {
  for (int64_t i = 0; i < n; ++i) {
    // torch.remainder(h + shift, 1) for h + shift in [-0.5, 1.5)
    float hh = h[i] + shift;
    hh = hh >= 1.0f ? hh - 1.0f : (hh < 0.0f ? hh + 1.0f : hh);
    o[i] = to_u8(color::hue_channel(hh, add, v[i], vs[i]));
  }
}

TT_INLINE void hue_chunk_impl(const uint8_t* img, int64_t HW, int64_t i0, int64_t i1, const float* shifts, int64_t P,
                              uint8_t* out, float* scratch) {
  const int64_t n = i1 - i0;
  float* h = scratch;
  float* vs = scratch + n;
  float* v = scratch + 2 * n;
  hsv_features(img, HW, i0, n, h, vs, v);
  for (int64_t p = 0; p < P; ++p) {
    uint8_t* o = out + (p * 3) * HW + i0;
    hue_plane(h, vs, v, n, shifts[p], 5.0f, o);
    hue_plane(h, vs, v, n, shifts[p], 3.0f, o + HW);
    hue_plane(h, vs, v, n, shifts[p], 1.0f, o + 2 * HW);
  }
}
TT_TWICE(TT_AVX2, void, hue_chunk,
         (const uint8_t* img, int64_t HW, int64_t i0, int64_t i1, const float* shifts, int64_t P, uint8_t* out,
          float* scratch),
         (img, HW, i0, i1, shifts, P, out, scratch))

}  // namespace

LutKind classify_lut(const uint8_t* t) {
  const uint8_t bits = t[0], mask = static_cast<uint8_t>(t[255] ^ bits);
  for (int i = 0; i < 256; ++i)
    if (t[i] != static_cast<uint8_t>((i & mask) ^ bits)) return {false, 0, 0};
  return {true, mask, bits};
}

void lut_plane(const uint8_t* src, int64_t n, const uint8_t* table, LutKind kind, uint8_t* dst) {
  TT_PICK(lut_plane)(src, n, table, kind, dst);
}

void histogram_plane(const uint8_t* src, int64_t n, int64_t* hist) {
  // four sub-histograms, so runs of equal bytes do not serialise on one counter
  uint32_t h[4][256];
  std::memset(h, 0, sizeof h);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    ++h[0][src[i]];
    ++h[1][src[i + 1]];
    ++h[2][src[i + 2]];
    ++h[3][src[i + 3]];
  }
  for (; i < n; ++i) ++h[0][src[i]];
  for (int v = 0; v < 256; ++v) hist[v] += static_cast<int64_t>(h[0][v]) + h[1][v] + h[2][v] + h[3][v];
}

void blend_chunk(const uint8_t* img, int64_t H, int64_t W, int64_t i0, int64_t i1, int mode, const float* factors,
                 int64_t P, uint8_t* out, float* scratch) {
  TT_PICK(blend_chunk)(img, H, W, i0, i1, mode, factors, P, out, scratch);
}

void hue_chunk(const uint8_t* img, int64_t HW, int64_t i0, int64_t i1, const float* shifts, int64_t P, uint8_t* out,
               float* scratch) {
  TT_PICK(hue_chunk)(img, HW, i0, i1, shifts, P, out, scratch);
}

}  // namespace tt
}  // namespace invfast
