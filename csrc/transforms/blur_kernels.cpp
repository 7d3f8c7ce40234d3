// Separable Gaussian blur of uint8 planes: a horizontal pass into a float plane, a vertical pass out of it,
// both over symmetric taps (each pair of mirrored samples added before its one multiply), reflect padding,
// 32 outputs per step held in registers. Float32 on 0..255 values: within one level of the torch reference
// (conv2d on v / 255), which sums in another order. No fused multiply-add: every CPU level rounds each product
// and sum alike, so a pixel whose sum lands at a rounding edge is the same level on every machine.
#include "transforms/kernels.h"
#include "transforms/simd.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/no_fp_contract.h"  // after every other include

namespace invfast {
namespace tt {
namespace {

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"  // v8f never crosses a non-inlined call
typedef float v8f __attribute__((vector_size(32)));

TT_INLINE v8f ld8(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
TT_INLINE void st8(float* p, v8f v) { std::memcpy(p, &v, sizeof v); }
#define TT_HAVE_V8 1
#else
#define TT_HAVE_V8 0
#endif

// out[x] = w[0] centre[x] + sum_k w[k] (lo[k][x] + hi[k][x]), x in [0, n): lo[k]/hi[k] are the lines at -k/+k
TT_INLINE void fir(const float* centre, const float* const* lo, const float* const* hi, int64_t n, const float* w,
                   int64_t R, float* out) {
  int64_t x = 0;
#if TT_HAVE_V8
  for (; x + 32 <= n; x += 32) {
    v8f a0 = w[0] * ld8(centre + x), a1 = w[0] * ld8(centre + x + 8);
    v8f a2 = w[0] * ld8(centre + x + 16), a3 = w[0] * ld8(centre + x + 24);
    for (int64_t k = 1; k <= R; ++k) {
      const float* l = lo[k] + x;
      const float* h = hi[k] + x;
      const float wk = w[k];
      a0 += wk * (ld8(l) + ld8(h));
      a1 += wk * (ld8(l + 8) + ld8(h + 8));
      a2 += wk * (ld8(l + 16) + ld8(h + 16));
      a3 += wk * (ld8(l + 24) + ld8(h + 24));
    }
    st8(out + x, a0);
    st8(out + x + 8, a1);
    st8(out + x + 16, a2);
    st8(out + x + 24, a3);
  }
  for (; x + 8 <= n; x += 8) {
    v8f a = w[0] * ld8(centre + x);
    for (int64_t k = 1; k <= R; ++k) a += w[k] * (ld8(lo[k] + x) + ld8(hi[k] + x));
    st8(out + x, a);
  }
#endif
  for (; x < n; ++x) {
    float a = w[0] * centre[x];
    for (int64_t k = 1; k <= R; ++k) a += w[k] * (lo[k][x] + hi[k][x]);
    out[x] = a;
  }
}

TT_INLINE int64_t reflect(int64_t i, int64_t n) { return i < 0 ? -i : (i >= n ? 2 * (n - 1) - i : i); }

TT_INLINE void blur_plane_impl(const uint8_t* src, int64_t H, int64_t W, const float* w, int64_t R, uint8_t* dst,
                               float* scratch) {
  float* tmp = scratch;                // [H][W] after the horizontal pass
  float* row = tmp + H * W;            // one padded source row [W + 2R]
  float* acc = row + W + 2 * R;        // one output row [W]
  std::vector<const float*> lo(R + 1), hi(R + 1);
  for (int64_t y = 0; y < H; ++y) {
    const uint8_t* s = src + y * W;
    for (int64_t j = -R; j < W + R; ++j) row[R + j] = static_cast<float>(s[reflect(j, W)]);
    const float* c = row + R;
    for (int64_t k = 1; k <= R; ++k) {
      lo[k] = c - k;
      hi[k] = c + k;
    }
    fir(c, lo.data(), hi.data(), W, w, R, tmp + y * W);
  }
  for (int64_t y = 0; y < H; ++y) {
    for (int64_t k = 1; k <= R; ++k) {
      lo[k] = tmp + reflect(y - k, H) * W;
      hi[k] = tmp + reflect(y + k, H) * W;
    }
    fir(tmp + y * W, lo.data(), hi.data(), W, w, R, acc);
    uint8_t* d = dst + y * W;
    for (int64_t x = 0; x < W; ++x) {
      const float v = std::min(std::max(acc[x] + 0.5f, 0.0f), 255.0f);
      d[x] = static_cast<uint8_t>(static_cast<int32_t>(v));
    }
  }
}
TT_TWICE(TT_AVX2_FMA, void, blur_plane,
         (const uint8_t* src, int64_t H, int64_t W, const float* w, int64_t R, uint8_t* dst, float* scratch),
         (src, H, W, w, R, dst, scratch))

}  // namespace

int64_t blur_scratch_floats(int64_t H, int64_t W, int64_t R) { return H * W + (W + 2 * R) + W; }

void blur_plane(const uint8_t* src, int64_t H, int64_t W, const float* w, int64_t R, uint8_t* dst, float* scratch) {
  if (R == 0 && w[0] == 1.0f) {  // a single tap of 1: the plane itself
    std::memcpy(dst, src, static_cast<size_t>(H * W));
    return;
  }
#if INVFAST_TT_X86
  (cpu_isa_at_least(CpuIsa::kAvx2) ? blur_plane_avx2 : blur_plane_base)(src, H, W, w, R, dst, scratch);
#else
  blur_plane_base(src, H, W, w, R, dst, scratch);
#endif
}

}  // namespace tt
}  // namespace invfast
