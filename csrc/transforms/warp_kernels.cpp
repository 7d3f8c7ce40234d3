// Affine warps of uint8 images for the geometric test transforms, one strategy per map:
//   kCopy / kTransposed: integer maps (flips, integer shifts, 90-degree rotations) copy bytes exactly;
//   kSeparable: axis-aligned maps (crop, scale >= 1, translation) interpolate each needed source row once
//               horizontally, then every output row vertically;
//   kGeneral: bilinear with the row's coordinates computed once for all planes (AVX2: two 4-byte gathers per
//             8 pixels fetch the 4 neighbours).
// Source planes are padded with 2 pixels of fill, so no neighbour needs a bounds test. Bilinear results equal
// the general formula top = v00 + fx (v01 - v00), bottom likewise, top + fy (bottom - top), rounded half up,
// whatever the strategy (no fused multiply-add in this file).
#include "transforms/kernels.h"
#include "transforms/simd.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if INVFAST_TT_X86
#include <immintrin.h>
#endif

#include "common/no_fp_contract.h"  // after every other include

namespace invfast {
namespace tt {
namespace {

constexpr int64_t kPad = 2;
constexpr int64_t kTile = 16;  // output rows per tile of a transposed copy

TT_INLINE uint8_t store_u8(float v) {
  v += 0.5f;
  v = std::min(std::max(v, 0.0f), 255.0f);
  return static_cast<uint8_t>(static_cast<int32_t>(v));
}

bool is_int(double v) { return std::floor(v) == v && std::fabs(v) < 1e9; }

// source column/row of the top-left neighbour, clamped into the padding, and the fraction
TT_INLINE void split(double s, int64_t n, int64_t& i, float& f) {
  const double f0 = std::floor(s);
  f = static_cast<float>(s - f0);
  i = static_cast<int64_t>(std::min(std::max(f0, -2.0), static_cast<double>(n))) + kPad;
}

// ------------------------------------------------------------------------------------------ bilinear rows
template <typename T>
TT_INLINE void bilinear_row(const T* plane, int64_t Wp, const int32_t* idx, const float* fx, const float* fy,
                            int64_t x, int64_t n, uint8_t* out) {
  for (; x < n; ++x) {
    const T* q = plane + idx[x];
    const float v00 = q[0], v01 = q[1], v10 = q[Wp], v11 = q[Wp + 1];
    const float top = v00 + fx[x] * (v01 - v00);
    const float bot = v10 + fx[x] * (v11 - v10);
    out[x] = store_u8(top + fy[x] * (bot - top));
  }
}

template <typename T>
TT_INLINE void lerp_columns(const T* prow, const int32_t* cidx, const float* fx, int64_t x, int64_t n, float* out) {
  for (; x < n; ++x) {
    const float a = prow[cidx[x]], b = prow[cidx[x] + 1];
    out[x] = a + fx[x] * (b - a);
  }
}

TT_INLINE void lerp_rows(const float* top, const float* bot, float fy, int64_t n, uint8_t* out) {
  for (int64_t x = 0; x < n; ++x) out[x] = store_u8(top[x] + fy * (bot[x] - top[x]));
}

#if INVFAST_TT_X86
TT_AVX2 inline __m256 lo_byte(__m256i g, int shift) {
  return _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(g, shift), _mm256_set1_epi32(0xFF)));
}

TT_AVX2 inline int64_t bilinear_row_avx2(const uint8_t* plane, int64_t Wp, const int32_t* idx, const float* fx,
                                         const float* fy, int64_t n, uint8_t* out) {
  const __m256 half = _mm256_set1_ps(0.5f), zero = _mm256_setzero_ps(), top255 = _mm256_set1_ps(255.0f);
  const int* p0 = reinterpret_cast<const int*>(plane);
  const int* p1 = reinterpret_cast<const int*>(plane + Wp);
  int64_t x = 0;
  for (; x + 8 <= n; x += 8) {
    const __m256i vi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(idx + x));
    const __m256i g0 = _mm256_i32gather_epi32(p0, vi, 1);  // bytes v00, v01, ..
    const __m256i g1 = _mm256_i32gather_epi32(p1, vi, 1);  // bytes v10, v11, ..
    const __m256 v00 = lo_byte(g0, 0), v01 = lo_byte(g0, 8), v10 = lo_byte(g1, 0), v11 = lo_byte(g1, 8);
    const __m256 fxv = _mm256_loadu_ps(fx + x), fyv = _mm256_loadu_ps(fy + x);
    const __m256 top = _mm256_add_ps(v00, _mm256_mul_ps(fxv, _mm256_sub_ps(v01, v00)));
    const __m256 bot = _mm256_add_ps(v10, _mm256_mul_ps(fxv, _mm256_sub_ps(v11, v10)));
    __m256 r = _mm256_add_ps(_mm256_add_ps(top, _mm256_mul_ps(fyv, _mm256_sub_ps(bot, top))), half);
    r = _mm256_min_ps(_mm256_max_ps(r, zero), top255);
    const __m256i ri = _mm256_cvttps_epi32(r);
    const __m128i w16 = _mm_packus_epi32(_mm256_castsi256_si128(ri), _mm256_extracti128_si256(ri, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out + x), _mm_packus_epi16(w16, w16));
  }
  return x;
}

TT_AVX2 inline int64_t lerp_columns_avx2(const uint8_t* prow, const int32_t* cidx, const float* fx, int64_t n,
                                         float* out) {
  const int* p = reinterpret_cast<const int*>(prow);
  int64_t x = 0;
  for (; x + 8 <= n; x += 8) {
    const __m256i g = _mm256_i32gather_epi32(p, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(cidx + x)), 1);
    const __m256 a = lo_byte(g, 0), b = lo_byte(g, 8);
    _mm256_storeu_ps(out + x, _mm256_add_ps(a, _mm256_mul_ps(_mm256_loadu_ps(fx + x), _mm256_sub_ps(b, a))));
  }
  return x;
}
#endif

template <typename T, bool Avx>
TT_INLINE void bilinear_any(const T* plane, int64_t Wp, const int32_t* idx, const float* fx, const float* fy,
                            int64_t n, uint8_t* out) {
  int64_t x = 0;
#if INVFAST_TT_X86
  if constexpr (Avx && sizeof(T) == 1) x = bilinear_row_avx2(plane, Wp, idx, fx, fy, n, out);
#endif
  bilinear_row(plane, Wp, idx, fx, fy, x, n, out);
}

template <typename T, bool Avx>
TT_INLINE void lerp_columns_any(const T* prow, const int32_t* cidx, const float* fx, int64_t n, float* out) {
  int64_t x = 0;
#if INVFAST_TT_X86
  if constexpr (Avx && sizeof(T) == 1) x = lerp_columns_avx2(prow, cidx, fx, n, out);
#endif
  lerp_columns(prow, cidx, fx, x, n, out);
}

// ------------------------------------------------------------------------------------------ strategies
// n images (padded planes pstride elements apart, outputs ostride bytes apart) through one map: each row's
// coordinates are computed once for every image and plane
template <typename T, bool Avx>
TT_INLINE void warp_general(const T* padded, int64_t n, int64_t pstride, int64_t C, int64_t H, int64_t W,
                            const double* m, uint8_t* out, int64_t ostride, float* scratch) {
  const int64_t Wp = W + 2 * kPad, plane = (H + 2 * kPad) * Wp;
  int32_t* idx = reinterpret_cast<int32_t*>(scratch);
  float* fx = scratch + W;
  float* fy = scratch + 2 * W;
  for (int64_t y = 0; y < H; ++y) {
    // pixels whose four neighbours are all padding are the fill; on a row they lie outside one interval
    // [lo, hi) (the source line crosses the image once), which is the only part sampled
    int64_t lo = W, hi = 0;
    for (int64_t x = 0; x < W; ++x) {
      int64_t xi, yi;
      split(m[0] * x + m[1] * y + m[2], W, xi, fx[x]);
      split(m[3] * x + m[4] * y + m[5], H, yi, fy[x]);
      idx[x] = static_cast<int32_t>(yi * Wp + xi);
      if (xi >= kPad - 1 && xi < W + kPad && yi >= kPad - 1 && yi < H + kPad) {
        lo = std::min(lo, x);
        hi = x + 1;
      }
    }
    lo = std::min(lo, hi);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < C; ++c) {
        const T* pl = padded + i * pstride + c * plane;
        uint8_t* o = out + i * ostride + (c * H + y) * W;
        const uint8_t f = store_u8(static_cast<float>(pl[0]));  // the bilinear value of four fill neighbours
        std::memset(o, f, static_cast<size_t>(lo));
        bilinear_any<T, Avx>(pl, Wp, idx + lo, fx + lo, fy + lo, hi - lo, o + lo);
        std::memset(o + hi, f, static_cast<size_t>(W - hi));
      }
  }
}

template <typename T, bool Avx>
TT_INLINE void warp_separable(const T* padded, int64_t C, int64_t H, int64_t W, const double* m, uint8_t* out,
                              float* scratch) {
  const int64_t Wp = W + 2 * kPad, plane = (H + 2 * kPad) * Wp;
  int32_t* cidx = reinterpret_cast<int32_t*>(scratch);
  float* fx = scratch + W;
  float* rows[2] = {scratch + 2 * W, scratch + 3 * W};
  for (int64_t x = 0; x < W; ++x) {
    int64_t xi;
    split(m[0] * x + m[1] * 0 + m[2], W, xi, fx[x]);
    cidx[x] = static_cast<int32_t>(xi);
  }
  for (int64_t c = 0; c < C; ++c) {
    const T* p = padded + c * plane;
    int64_t ids[2] = {-1, -1};
    for (int64_t y = 0; y < H; ++y) {
      int64_t r;
      float fy;
      split(m[3] * 0 + m[4] * y + m[5], H, r, fy);
      int st = ids[0] == r ? 0 : (ids[1] == r ? 1 : -1);
      int sb = ids[0] == r + 1 ? 0 : (ids[1] == r + 1 ? 1 : -1);
      if (st < 0) {
        st = sb == 0 ? 1 : 0;
        lerp_columns_any<T, Avx>(p + r * Wp, cidx, fx, W, rows[st]);
        ids[st] = r;
      }
      if (sb < 0) {
        sb = 1 - st;
        lerp_columns_any<T, Avx>(p + (r + 1) * Wp, cidx, fx, W, rows[sb]);
        ids[sb] = r + 1;
      }
      lerp_rows(rows[st], rows[sb], fy, W, out + (c * H + y) * W);
    }
  }
}

TT_INLINE void warp_copy(const uint8_t* img, int64_t C, int64_t H, int64_t W, const double* m, const uint8_t* fill,
                         uint8_t* out) {
  const int64_t ax = static_cast<int64_t>(m[0]), ay = static_cast<int64_t>(m[4]);
  const int64_t bx = static_cast<int64_t>(m[2]), by = static_cast<int64_t>(m[5]);
  // valid output columns: 0 <= ax x + bx < W
  const int64_t lo = ax > 0 ? std::max<int64_t>(0, -bx) : std::max<int64_t>(0, bx - W + 1);
  const int64_t hi = std::max(lo, ax > 0 ? std::min<int64_t>(W, W - bx) : std::min<int64_t>(W, bx + 1));
  for (int64_t c = 0; c < C; ++c) {
    if (ax > 0 && ay == 1 && bx == 0) {  // whole rows in order (identity, vertical shifts): one block copy
      const int64_t y0 = std::min(H, std::max<int64_t>(0, -by)), y1 = std::max(y0, std::min(H, H - by));
      uint8_t* d = out + c * H * W;
      std::memset(d, fill[c], static_cast<size_t>(y0 * W));
      if (y1 > y0) std::memcpy(d + y0 * W, img + (c * H + y0 + by) * W, static_cast<size_t>((y1 - y0) * W));
      std::memset(d + y1 * W, fill[c], static_cast<size_t>((H - y1) * W));
      continue;
    }
    for (int64_t y = 0; y < H; ++y) {
      uint8_t* d = out + (c * H + y) * W;
      const int64_t sy = ay * y + by;
      if (sy < 0 || sy >= H || lo >= hi) {
        std::memset(d, fill[c], static_cast<size_t>(W));
        continue;
      }
      const uint8_t* s = img + (c * H + sy) * W;
      if (lo > 0) std::memset(d, fill[c], static_cast<size_t>(lo));
      if (ax > 0) {
        std::memcpy(d + lo, s + lo + bx, static_cast<size_t>(hi - lo));
      } else {
        const uint8_t* e = s + bx;  // d[x] = s[bx - x]
        for (int64_t x = lo; x < hi; ++x) d[x] = e[-x];
      }
      if (hi < W) std::memset(d + hi, fill[c], static_cast<size_t>(W - hi));
    }
  }
}

TT_INLINE void warp_transposed(const uint8_t* img, int64_t C, int64_t H, int64_t W, const double* m,
                               const uint8_t* fill, uint8_t* out) {
  // output (x, y) <- source (m1 y + m2, m3 x + m5): an output column is (part of) a source row
  const int64_t ay = static_cast<int64_t>(m[1]), bx = static_cast<int64_t>(m[2]);
  const int64_t ax = static_cast<int64_t>(m[3]), by = static_cast<int64_t>(m[5]);
  for (int64_t c = 0; c < C; ++c) {
    const uint8_t* src = img + c * H * W;
    uint8_t* dst = out + c * H * W;
    for (int64_t y0 = 0; y0 < H; y0 += kTile) {
      const int64_t yn = std::min(kTile, H - y0);
      for (int64_t x = 0; x < W; ++x) {
        const int64_t sy = ax * x + by;
        uint8_t* d = dst + y0 * W + x;
        if (sy < 0 || sy >= H) {
          for (int64_t t = 0; t < yn; ++t) d[t * W] = fill[c];
          continue;
        }
        const uint8_t* s = src + sy * W;
        for (int64_t t = 0; t < yn; ++t) {
          const int64_t sx = ay * (y0 + t) + bx;
          d[t * W] = (sx >= 0 && sx < W) ? s[sx] : fill[c];
        }
      }
    }
  }
}

template <typename T, bool Avx>
TT_INLINE void warp_image_impl(const uint8_t* img, const T* padded, int64_t n, int64_t pstride, int64_t C, int64_t H,
                               int64_t W, const double* m, int kind, const uint8_t* fill_level, uint8_t* out,
                               int64_t ostride, float* scratch) {
  if (kind == kGeneral) return warp_general<T, Avx>(padded, n, pstride, C, H, W, m, out, ostride, scratch);
  for (int64_t i = 0; i < n; ++i, img += C * H * W, padded += pstride, out += ostride) {
    switch (kind) {
      case kCopy:
        warp_copy(img, C, H, W, m, fill_level, out);
        break;
      case kTransposed:
        warp_transposed(img, C, H, W, m, fill_level, out);
        break;
      default:
        warp_separable<T, Avx>(padded, C, H, W, m, out, scratch);
    }
  }
}

// n images through one map, compiled for AVX2 and for the baseline (warp_images picks one)
#define TT_WARP_ARGS                                                                                         \
  const uint8_t *img, const T *padded, int64_t n, int64_t pstride, int64_t C, int64_t H, int64_t W,          \
      const double *m, int kind, const uint8_t *fill_level, uint8_t *out, int64_t ostride, float *scratch
#define TT_WARP_CALL img, padded, n, pstride, C, H, W, m, kind, fill_level, out, ostride, scratch
#if INVFAST_TT_X86
template <typename T>
TT_AVX2 void warp_avx2(TT_WARP_ARGS) {
  warp_image_impl<T, true>(TT_WARP_CALL);
}
#endif
template <typename T>
void warp_base(TT_WARP_ARGS) {
  warp_image_impl<T, false>(TT_WARP_CALL);
}

template <typename T>
void warp_pick(TT_WARP_ARGS) {
#if INVFAST_TT_X86
  if (cpu_isa_at_least(CpuIsa::kAvx2)) return warp_avx2<T>(TT_WARP_CALL);
#endif
  warp_base<T>(TT_WARP_CALL);
}

template <typename T, typename F>
void pad_planes_t(const uint8_t* img, int64_t C, int64_t H, int64_t W, F fill_of, T* padded) {
  const int64_t Wp = W + 2 * kPad, plane = (H + 2 * kPad) * Wp;
  for (int64_t c = 0; c < C; ++c) {
    T* p = padded + c * plane;
    const T f = fill_of(c);
    std::fill(p, p + plane, f);
    for (int64_t y = 0; y < H; ++y) {
      const uint8_t* s = img + (c * H + y) * W;
      T* d = p + (y + kPad) * Wp + kPad;
      for (int64_t x = 0; x < W; ++x) d[x] = static_cast<T>(s[x]);
    }
  }
  std::fill(padded + C * plane, padded + C * plane + 4, T(0));  // the trailing bytes of the last 4-byte loads
}

}  // namespace

int classify_map(const double* m) {
  bool integral = true;
  for (int i = 0; i < 6; ++i) integral = integral && is_int(m[i]);
  if (integral) {
    if (m[1] == 0 && m[3] == 0 && std::fabs(m[0]) == 1 && std::fabs(m[4]) == 1) return kCopy;
    if (m[0] == 0 && m[4] == 0 && std::fabs(m[1]) == 1 && std::fabs(m[3]) == 1) return kTransposed;
  }
  // rows of the source touched by an axis-aligned map: at most one new one per output row when |m4| <= 1
  if (m[1] == 0 && m[3] == 0 && std::fabs(m[4]) <= 1) return kSeparable;
  return kGeneral;
}

int64_t padded_elems(int64_t C, int64_t H, int64_t W) { return C * (H + 2 * kPad) * (W + 2 * kPad) + 4; }

void pad_planes(const uint8_t* img, int64_t C, int64_t H, int64_t W, const uint8_t* fill, uint8_t* padded) {
  pad_planes_t<uint8_t>(img, C, H, W, [fill](int64_t c) { return fill[c]; }, padded);
}

void pad_planes(const uint8_t* img, int64_t C, int64_t H, int64_t W, const double* fill, float* padded) {
  pad_planes_t<float>(img, C, H, W, [fill](int64_t c) { return static_cast<float>(fill[c]); }, padded);
}

int64_t warp_scratch_floats(int64_t W) { return 4 * W; }

void warp_images(const uint8_t* img, const uint8_t* padded, int64_t n, int64_t pstride, int64_t C, int64_t H, int64_t W,
                 const double* m, int kind, const uint8_t* fill_level, uint8_t* out, int64_t ostride, float* scratch) {
  warp_pick<uint8_t>(TT_WARP_CALL);
}

void warp_images(const uint8_t* img, const float* padded, int64_t n, int64_t pstride, int64_t C, int64_t H, int64_t W,
                 const double* m, int kind, const uint8_t* fill_level, uint8_t* out, int64_t ostride, float* scratch) {
  warp_pick<float>(TT_WARP_CALL);
}

}  // namespace tt
}  // namespace invfast
