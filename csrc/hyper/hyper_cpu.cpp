// CPU kernels for batched hypernetwork weight generation.
//
// Every generated kernel l of the network is affine in its hidden vector:
//   out[b, n] = bias[n] + sum_h weight[n, h] * hidden[b, l, h]   for n in [offsets[l], offsets[l+1])
// where rows n of `weight`/`bias` are the packed output layers of all per-kernel hypernetworks.
// Row n of a kernel's block is the row-major (out, in, kh, kw) index, so out[b] is the flat
// concatenation of all conv weights in their final layout.
//
// Forward: rows are split into chunks (never crossing a kernel boundary) that run in parallel.
// With AVX-512 (checked at run time) and H a multiple of 16, each chunk runs the row-tile kernel of
// hyper_cpu_avx512.h: 16 rows at a time, each weight row read once for all B descriptors, fp32
// accumulation, fp32 / bf16 / fp16 storage. Otherwise one BLAS GEMM per kernel into the output.
// Backward: per chunk, two BLAS GEMMs (grad_weight = g^T h, partial grad_hidden = g W).
#include <torch/extension.h>
#include <torch/library.h>
#include <ATen/Parallel.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "common/parallel.h"
#include "hyper/hyper_common.h"
#include "hyper/hyper_cpu_avx512.h"

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace invfast {
namespace {

constexpr int64_t kChunkRows = 8192;  // a multiple of the 16-row tile
// Outputs larger than this are asked for transparent huge pages.
constexpr int64_t kLargeOutputBytes = int64_t(32) << 20;

// Ask Linux for transparent huge pages on a fresh, not yet touched allocation: a 750 MB output
// (Hyper-ResNet-50, B = 8) otherwise costs ~190k page faults on first touch. Only a hint.
void advise_huge_pages(void* p, int64_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHuge = uintptr_t(2) << 20;
  const uintptr_t a = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(bytes)) & ~(kHuge - 1);
  if (e > a) (void)madvise(reinterpret_cast<void*>(a), e - a, MADV_HUGEPAGE);
#else
  (void)p;
  (void)bytes;
#endif
}

struct Chunk {
  int64_t kernel, begin, end;
};

std::vector<Chunk> make_chunks(at::IntArrayRef offsets) {
  std::vector<Chunk> chunks;
  const int64_t L = static_cast<int64_t>(offsets.size()) - 1;
  for (int64_t l = 0; l < L; ++l) {
    for (int64_t r = offsets[l]; r < offsets[l + 1]; r += kChunkRows) {
      chunks.push_back({l, r, std::min(r + kChunkRows, offsets[l + 1])});
    }
  }
  return chunks;
}

// Storage type of the AVX-512 loads/stores for an ATen scalar type.
template <typename scalar_t>
struct Raw {
  using T = scalar_t;
};
template <>
struct Raw<c10::BFloat16> {
  using T = uint16_t;
};
template <>
struct Raw<c10::Half> {
  using T = uint16_t;
};

// Rows [begin, end) of kernel l, one row at a time (fp32 accumulation): the tail of a kernel
// whose size is not a multiple of 16, and CPUs without AVX-512.
template <typename scalar_t>
void rows_scalar(const scalar_t* weight, const scalar_t* bias, const float* hf, scalar_t* out, int64_t B, int64_t L,
                 int64_t H, int64_t N, int64_t l, int64_t begin, int64_t end) {
  for (int64_t n = begin; n < end; ++n) {
    const scalar_t* w = weight + n * H;
    const float bn = static_cast<float>(bias[n]);
    for (int64_t b = 0; b < B; ++b) {
      const float* h = hf + (b * L + l) * H;
      float acc = 0.f;
      for (int64_t k = 0; k < H; ++k) acc += static_cast<float>(w[k]) * h[k];
      out[b * N + n] = static_cast<scalar_t>(acc + bn);
    }
  }
}

// Row-tiled path: every weight row is read once for all B descriptors (see hyper_cpu_avx512.h).
template <typename scalar_t>
void generate_tiled(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& bias, at::Tensor& out,
                    at::IntArrayRef offsets) {
  const int64_t B = hidden.size(0), L = hidden.size(1), H = hidden.size(2), N = weight.size(0);
  const auto hf_t = hidden.to(at::kFloat).contiguous();
  const float* hf = hf_t.data_ptr<float>();
  const scalar_t* w = weight.data_ptr<scalar_t>();
  const scalar_t* bp = bias.data_ptr<scalar_t>();
  scalar_t* op = out.data_ptr<scalar_t>();
  const auto chunks = make_chunks(offsets);
  const bool avx512 = hyper_avx512::usable() && H % 16 == 0;
#if INVFAST_HYPER_HAVE_AVX512
  const bool hsum = B <= hyper_avx512::kHsumMaxB && hyper_avx512::hsum_layout().valid;
#endif
  // Each chunk is an item of parallel::run_items: every worker takes the next chunk from a shared counter, so a
  // worker that loses its core on a busy machine delays the call by one chunk, not by half the work.
  const int64_t C = static_cast<int64_t>(chunks.size());
  parallel::run_items(C, parallel::kAlwaysFork, 16 * H + 16, [&](int64_t c, float* scratch) {
    float* cols = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch) + 63) & ~uintptr_t(63));
    const Chunk& ch = chunks[c];
    int64_t tiled_end = ch.begin;
#if INVFAST_HYPER_HAVE_AVX512
    if (avx512) {
      tiled_end = ch.begin + (ch.end - ch.begin) / 16 * 16;
      using T = typename Raw<scalar_t>::T;
      const T* wr = reinterpret_cast<const T*>(w);
      const T* br = reinterpret_cast<const T*>(bp);
      T* orw = reinterpret_cast<T*>(op);
      if constexpr (std::is_same_v<scalar_t, float>) {
        if (hsum) hyper_avx512::rows_hsum<hyper_avx512::F32>(wr, br, hf, orw, B, L, H, N, ch.kernel, ch.begin, tiled_end);
        else hyper_avx512::rows_tiles<hyper_avx512::F32>(wr, br, hf, orw, B, L, H, N, ch.kernel, ch.begin, tiled_end, cols);
      } else if constexpr (std::is_same_v<scalar_t, c10::BFloat16>) {
        if (hsum) hyper_avx512::rows_hsum<hyper_avx512::BF16>(wr, br, hf, orw, B, L, H, N, ch.kernel, ch.begin, tiled_end);
        else hyper_avx512::rows_tiles<hyper_avx512::BF16>(wr, br, hf, orw, B, L, H, N, ch.kernel, ch.begin, tiled_end, cols);
      } else {
        if (hsum) hyper_avx512::rows_hsum<hyper_avx512::F16>(wr, br, hf, orw, B, L, H, N, ch.kernel, ch.begin, tiled_end);
        else hyper_avx512::rows_tiles<hyper_avx512::F16>(wr, br, hf, orw, B, L, H, N, ch.kernel, ch.begin, tiled_end, cols);
      }
    }
#endif
    rows_scalar<scalar_t>(w, bp, hf, op, B, L, H, N, ch.kernel, tiled_end, ch.end);
  });
}

at::Tensor hyper_generate_cpu(const at::Tensor& hidden_in, const at::Tensor& weight_in, const at::Tensor& bias_in,
                              at::IntArrayRef offsets) {
  hyper_common::check_inputs(hidden_in, weight_in, offsets, "hyper_generate");
  // The inner ATen calls are implementation details: keep autograd out of them.
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  hyper_common::check_bias(bias_in, weight_in);
  const auto hidden = hidden_in.contiguous();
  const auto weight = weight_in.contiguous();
  const auto bias = bias_in.contiguous();
  const int64_t B = hidden.size(0), N = weight.size(0);
  auto out = at::empty({B, N}, weight.options());
  if (B == 0 || N == 0) return out;
  if (static_cast<int64_t>(out.nbytes()) >= kLargeOutputBytes) advise_huge_pages(out.data_ptr(), out.nbytes());
  const auto st = weight.scalar_type();
  const bool tiled_ok = hyper_avx512::usable() && hidden.size(2) % 16 == 0 &&
                        (st == at::kFloat || st == at::kBFloat16 || st == at::kHalf);
  if (tiled_ok) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, st, "hyper_generate_tiled", [&] {
      if constexpr (!std::is_same_v<scalar_t, double>) generate_tiled<scalar_t>(hidden, weight, bias, out, offsets);
    });
    return out;
  }
  // Anything else (float64, H not a multiple of 16, no AVX-512): one BLAS GEMM per kernel,
  // straight into the output, each threaded by the BLAS library.
  hyper_common::generate_per_kernel_gemm(out, hidden, weight, bias, offsets);
  return out;
}

// Gradients of hyper_generate: grad [B, N] -> (grad_hidden [B, L, H], grad_weight [N, H], grad_bias [N]).
std::tuple<at::Tensor, at::Tensor, at::Tensor> hyper_generate_backward_cpu(const at::Tensor& grad_in,
                                                                          const at::Tensor& hidden_in,
                                                                          const at::Tensor& weight_in,
                                                                          at::IntArrayRef offsets) {
  hyper_common::check_inputs(hidden_in, weight_in, offsets, "hyper_generate_backward");
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  const auto grad = grad_in.contiguous();
  const auto hidden = hidden_in.contiguous();
  const auto weight = weight_in.contiguous();
  const int64_t B = hidden.size(0), L = hidden.size(1), H = hidden.size(2), N = weight.size(0);
  TORCH_CHECK(grad.dim() == 2 && grad.size(0) == B && grad.size(1) == N,
              "hyper_generate_backward: grad must be [B, N]");
  TORCH_CHECK(grad.scalar_type() == weight.scalar_type(), "hyper_generate_backward: grad must share weight's dtype");
  auto grad_weight = at::empty({N, H}, weight.options());
  auto grad_bias = N > 0 ? grad.sum(0) : at::zeros({N}, weight.options());
  const auto chunks = make_chunks(offsets);
  const int64_t C = static_cast<int64_t>(chunks.size());
  // Per-chunk partial grad_hidden, summed per kernel afterwards (chunks of one kernel would race).
  auto partial = at::empty({C, B, H}, weight.options());
  // TLS: worker threads need their own guard, made once per thread as its item state
  parallel::run_items_with(
      C, parallel::kAlwaysFork, [] { return std::make_unique<at::AutoDispatchBelowADInplaceOrView>(); },
      [&](int64_t c, std::unique_ptr<at::AutoDispatchBelowADInplaceOrView>&) {
    const Chunk& ch = chunks[c];
    const int64_t R = ch.end - ch.begin;
    const auto g = grad.narrow(1, ch.begin, R);  // [B, R]
    const auto h = hidden.select(1, ch.kernel);  // [B, H]
    auto gw = grad_weight.narrow(0, ch.begin, R);
    at::mm_out(gw, g.t(), h);
    auto p = partial.select(0, c);
    at::mm_out(p, g, weight.narrow(0, ch.begin, R));
  });
  auto grad_hidden = at::zeros({L, B, H}, weight.options());
  if (C > 0) {
    std::vector<int64_t> owner(C);
    for (int64_t c = 0; c < C; ++c) owner[c] = chunks[c].kernel;
    auto index = at::tensor(owner, at::TensorOptions().dtype(at::kLong));
    grad_hidden.index_add_(0, index, partial);
  }
  return {grad_hidden.permute({1, 0, 2}).contiguous(), grad_weight, grad_bias};
}

}  // namespace

TORCH_LIBRARY_IMPL(invfast, CPU, m) {
  m.impl("hyper_generate", &hyper_generate_cpu);
  m.impl("hyper_generate_backward", &hyper_generate_backward_cpu);
}

}  // namespace invfast
