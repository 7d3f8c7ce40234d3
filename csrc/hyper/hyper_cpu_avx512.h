// AVX-512 row-tile kernel for batched hypernetwork weight generation on the CPU.
//
// The extension is compiled without -march flags, so this code is compiled with a GCC/Clang
// `target` attribute and chosen at run time (cpu_has_avx512()). One tile is 16 consecutive rows
// n of the packed output layer `weight [N, H]` (all in one kernel l). For every 16-column block of
// the tile the 16 x 16 floats are loaded (converted to fp32 from fp32 / bf16 / fp16 storage) and
// transposed in registers, so that vector k holds weight[n .. n+15, k]. Each descriptor b then
// needs H fused multiply-adds with the broadcast hidden entry h[b, l, k]:
//   acc_b = sum_k weight[tile, k] * h[b, l, k]          (16 rows at once, fp32 accumulation)
// so every weight row is read from memory once for all B descriptors. The in-register transpose
// network returns rows in a permuted lane order; that order is measured once at start-up by running
// the network on an index tile (TransposeLayout) and undone with one lane permutation per output.
#pragma once

#include <cstdint>
#include <cstring>

#include "common/cpu_isa.h"

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#define INVFAST_HYPER_HAVE_AVX512 1
#include <immintrin.h>
#define INVFAST_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")))
#define INVFAST_AVX512_INLINE __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma,f16c"), always_inline)) inline
#else
#define INVFAST_HYPER_HAVE_AVX512 0
#endif

namespace invfast {
namespace hyper_avx512 {

#if INVFAST_HYPER_HAVE_AVX512

// x86-64-v4 (AVX-512 F/BW/CD/DQ/VL on top of v3's FMA and F16C), where the core's ISA policy allows it
inline bool cpu_has_avx512() { return cpu_isa_at_least(CpuIsa::kAvx512); }

// 16 x 16 transpose network: unpack (32-bit), unpack (64-bit), two 128-bit lane shuffles.
INVFAST_AVX512_INLINE void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
    r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0x88);
    t[4 + i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0xdd);
    t[8 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0x88);
    t[12 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0xdd);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
    r[4 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xdd);
    r[8 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0x88);
    r[12 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0xdd);
  }
}

// Where the network puts things: output vector m holds column col_of[m] of the input tile, its lane
// j holds row row_of_lane[j] (the same for every m, checked); lane_of_row is the inverse.
struct TransposeLayout {
  int col_of[16];
  int32_t lane_of_row[16];
  bool valid = true;
};

INVFAST_AVX512 inline TransposeLayout measure_layout() {
  alignas(64) float tile[16][16];
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) tile[i][j] = static_cast<float>(i * 16 + j);
  __m512 r[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_load_ps(tile[i]);
  transpose16(r);
  TransposeLayout lay;
  int row_of_lane[16];
  bool seen_row[16] = {}, seen_col[16] = {};
  for (int m = 0; m < 16; ++m) {
    alignas(64) float v[16];
    _mm512_store_ps(v, r[m]);
    const int col = static_cast<int>(v[0]) % 16;
    lay.col_of[m] = col;
    if (seen_col[col]) lay.valid = false;
    seen_col[col] = true;
    for (int j = 0; j < 16; ++j) {
      const int row = static_cast<int>(v[j]) / 16;
      if (static_cast<int>(v[j]) % 16 != col) lay.valid = false;
      if (m == 0) {
        row_of_lane[j] = row;
        if (seen_row[row]) lay.valid = false;
        seen_row[row] = true;
      } else if (row_of_lane[j] != row) {
        lay.valid = false;
      }
    }
  }
  for (int j = 0; j < 16; ++j) lay.lane_of_row[row_of_lane[j]] = j;
  return lay;
}

inline const TransposeLayout& layout() {
  static const TransposeLayout lay = measure_layout();
  return lay;
}

// Horizontal sums of 16 vectors into one (lane order permuted, see hsum_lane_of_row):
// 128-bit block shuffles, then in-block unpacks; 45 shuffles/adds for 16 row sums.
INVFAST_AVX512_INLINE __m512 hsum16(const __m512 s[16]) {
  __m512 x[8], y[4], z[2];
  for (int i = 0; i < 8; ++i) {
    x[i] = _mm512_add_ps(_mm512_shuffle_f32x4(s[2 * i], s[2 * i + 1], 0x44),
                         _mm512_shuffle_f32x4(s[2 * i], s[2 * i + 1], 0xee));
  }
  for (int i = 0; i < 4; ++i) {
    y[i] = _mm512_add_ps(_mm512_shuffle_f32x4(x[2 * i], x[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(x[2 * i], x[2 * i + 1], 0xdd));
  }
  for (int i = 0; i < 2; ++i) {
    z[i] = _mm512_add_ps(_mm512_unpacklo_ps(y[2 * i], y[2 * i + 1]), _mm512_unpackhi_ps(y[2 * i], y[2 * i + 1]));
  }
  const __m512d a = _mm512_castps_pd(z[0]), b = _mm512_castps_pd(z[1]);
  return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
}

// Lane permutation that puts hsum16's sums in row order (measured on vectors with one non-zero lane).
struct HsumLayout {
  int32_t lane_of_row[16];
  bool valid = true;
};

INVFAST_AVX512 inline HsumLayout measure_hsum_layout() {
  __m512 v[16];
  for (int r = 0; r < 16; ++r) {
    alignas(64) float e[16] = {};
    e[r] = static_cast<float>(r + 1);  // row r sums to r + 1; the non-zero lane moves with r
    v[r] = _mm512_load_ps(e);
  }
  alignas(64) float out[16];
  _mm512_store_ps(out, hsum16(v));
  HsumLayout lay;
  bool seen[16] = {};
  for (int j = 0; j < 16; ++j) {
    const int row = static_cast<int>(out[j]) - 1;
    if (row < 0 || row > 15 || seen[row]) {
      lay.valid = false;
      continue;
    }
    seen[row] = true;
    lay.lane_of_row[row] = j;
  }
  return lay;
}

inline const HsumLayout& hsum_layout() {
  static const HsumLayout lay = measure_hsum_layout();
  return lay;
}

// Loads / stores of 16 consecutive values of the storage dtype as fp32 lanes.
struct F32 {
  using T = float;
  INVFAST_AVX512_INLINE static __m512 load(const T* p) { return _mm512_loadu_ps(p); }
  INVFAST_AVX512_INLINE static void store(T* p, __m512 v) { _mm512_storeu_ps(p, v); }
};

struct BF16 {  // raw bfloat16 bits
  using T = uint16_t;
  INVFAST_AVX512_INLINE static __m512 load(const T* p) {
    const __m512i x = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
  }
  INVFAST_AVX512_INLINE static __m256i pack(__m512 v) {
    // round to nearest even; NaN stays a quiet NaN
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    r = _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7fc0));
    return _mm512_cvtepi32_epi16(r);
  }
  INVFAST_AVX512_INLINE static void store(T* p, __m512 v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), pack(v));
  }
};

struct F16 {  // raw IEEE half bits
  using T = uint16_t;
  INVFAST_AVX512_INLINE static __m512 load(const T* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  INVFAST_AVX512_INLINE static void store(T* p, __m512 v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
};

// acc[j] += sum_k cols[k] * h[(b0 + j) * hstride + k] for j < NB (NB descriptors in registers).
template <int NB>
INVFAST_AVX512_INLINE void accumulate(const float* cols, int64_t H, const float* h, int64_t hstride, __m512* acc) {
  for (int64_t k = 0; k < H; ++k) {
    const __m512 c = _mm512_load_ps(cols + 16 * k);
    for (int j = 0; j < NB; ++j) acc[j] = _mm512_fmadd_ps(c, _mm512_set1_ps(h[j * hstride + k]), acc[j]);
  }
}

template <typename S, int NB>
INVFAST_AVX512_INLINE void finish(const __m512* acc, __m512i perm, __m512 bias, typename S::T* out, int64_t ostride) {
  for (int j = 0; j < NB; ++j) S::store(out + j * ostride, _mm512_add_ps(_mm512_permutexvar_ps(perm, acc[j]), bias));
}

// Rows [begin, end) of kernel l (end - begin a multiple of 16) for all B descriptors.
//   weight [N, H] and bias [N] in storage S; hf [B, L, H] fp32; out [B, N] in storage S.
// cols: scratch of 16 * H floats, 64-byte aligned. (Non-temporal output stores were tried for
// large outputs: slower and more variable on the test machine.)
template <typename S>
INVFAST_AVX512 void rows_tiles(const typename S::T* weight, const typename S::T* bias, const float* hf,
                               typename S::T* out, int64_t B, int64_t L, int64_t H, int64_t N, int64_t l,
                               int64_t begin, int64_t end, float* cols) {
  const TransposeLayout& lay = layout();
  const __m512i perm = _mm512_loadu_si512(lay.lane_of_row);
  const float* hl = hf + l * H;
  const int64_t hstride = L * H;
  for (int64_t n = begin; n < end; n += 16) {
    for (int64_t kb = 0; kb < H; kb += 16) {
      __m512 r[16];
      for (int i = 0; i < 16; ++i) r[i] = S::load(weight + (n + i) * H + kb);
      transpose16(r);
      for (int m = 0; m < 16; ++m) _mm512_store_ps(cols + 16 * (kb + lay.col_of[m]), r[m]);
    }
    const __m512 bv = S::load(bias + n);
    int64_t b = 0;
    for (; b + 8 <= B; b += 8) {
      __m512 acc[8];
      for (int j = 0; j < 8; ++j) acc[j] = _mm512_setzero_ps();
      accumulate<8>(cols, H, hl + b * hstride, hstride, acc);
      finish<S, 8>(acc, perm, bv, out + b * N + n, N);
    }
    for (; b + 4 <= B; b += 4) {
      __m512 acc[4];
      for (int j = 0; j < 4; ++j) acc[j] = _mm512_setzero_ps();
      accumulate<4>(cols, H, hl + b * hstride, hstride, acc);
      finish<S, 4>(acc, perm, bv, out + b * N + n, N);
    }
    for (; b < B; ++b) {
      __m512 acc[1] = {_mm512_setzero_ps()};
      accumulate<1>(cols, H, hl + b * hstride, hstride, acc);
      finish<S, 1>(acc, perm, bv, out + b * N + n, N);
    }
  }
}

// The tiled kernels can run here: AVX-512 present and the transpose network's layout consistent.
inline bool usable() { return cpu_has_avx512() && layout().valid; }

// Few descriptors (B <= kHsumMaxB): per descriptor, 16 row products h . weight[n] as vectors, then
// one hsum16 (H/16 + 45 vector ops per 16 rows instead of the tile transpose's ~200).
constexpr int64_t kHsumMaxB = 2;

template <typename S>
INVFAST_AVX512 void rows_hsum(const typename S::T* weight, const typename S::T* bias, const float* hf,
                              typename S::T* out, int64_t B, int64_t L, int64_t H, int64_t N, int64_t l,
                              int64_t begin, int64_t end) {
  const __m512i perm = _mm512_loadu_si512(hsum_layout().lane_of_row);
  const float* hl = hf + l * H;
  for (int64_t n = begin; n < end; n += 16) {
    const __m512 bv = S::load(bias + n);
    for (int64_t b = 0; b < B; ++b) {
      const float* h = hl + b * L * H;
      __m512 sums[16];
      for (int r = 0; r < 16; ++r) sums[r] = _mm512_setzero_ps();
      for (int64_t kb = 0; kb < H; kb += 16) {
        const __m512 hv = _mm512_loadu_ps(h + kb);
        for (int r = 0; r < 16; ++r) sums[r] = _mm512_fmadd_ps(S::load(weight + (n + r) * H + kb), hv, sums[r]);
      }
      const __m512 v = _mm512_add_ps(_mm512_permutexvar_ps(perm, hsum16(sums)), bv);
      S::store(out + b * N + n, v);
    }
  }
}

#else

inline bool cpu_has_avx512() { return false; }
inline bool usable() { return false; }

#endif

}  // namespace hyper_avx512
}  // namespace invfast
