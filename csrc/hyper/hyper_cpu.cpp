// CPU kernels for batched hypernetwork weight generation.
//
// Every generated kernel l of the network is affine in its hidden vector:
//   out[b, n] = bias[n] + sum_h weight[n, h] * hidden[b, l, h]   for n in [offsets[l], offsets[l+1])
// where rows n of `weight`/`bias` are the packed output layers of all per-kernel hypernetworks.
// Row n of a kernel's block is the row-major (out, in, kh, kw) index, so out[b] is the flat
// concatenation of all conv weights in their final layout.
//
// Work is split into row chunks (never crossing a kernel boundary) that run in parallel;
// each chunk is one small GEMM through at::addmm_out writing straight into the output
// (a row-wise GEMV loop for a single descriptor).
#include <torch/extension.h>
#include <torch/library.h>
#include <ATen/Parallel.h>

#include <vector>

namespace invfast {
namespace {

constexpr int64_t kChunkRows = 4096;

struct Chunk {
  int64_t kernel, begin, end;
};

void check_inputs(const at::Tensor& hidden, const at::Tensor& weight, at::IntArrayRef offsets, const char* who) {
  TORCH_CHECK(hidden.dim() == 3, who, ": hidden must be [B, L, H], got ", hidden.dim(), " dims");
  TORCH_CHECK(weight.dim() == 2, who, ": weight must be [N, H], got ", weight.dim(), " dims");
  TORCH_CHECK(hidden.size(2) == weight.size(1), who, ": hidden size H differs (", hidden.size(2), " vs ",
              weight.size(1), ")");
  TORCH_CHECK(hidden.scalar_type() == weight.scalar_type(), who, ": hidden and weight must share a dtype");
  TORCH_CHECK(at::isFloatingType(weight.scalar_type()), who, ": floating dtype required");
  const int64_t L = hidden.size(1);
  TORCH_CHECK(static_cast<int64_t>(offsets.size()) == L + 1, who, ": offsets must have L + 1 = ", L + 1,
              " entries, got ", offsets.size());
  TORCH_CHECK(offsets[0] == 0, who, ": offsets[0] must be 0");
  for (int64_t l = 0; l < L; ++l) {
    TORCH_CHECK(offsets[l + 1] >= offsets[l], who, ": offsets must be non-decreasing");
  }
  TORCH_CHECK(offsets[L] == weight.size(0), who, ": offsets[-1] (", offsets[L], ") must equal weight rows (",
              weight.size(0), ")");
}

// One descriptor (B = 1): a row-wise GEMV that streams each weight row once; faster than a
// GEMM call per chunk for this memory-bound case. kH > 0 fixes the hidden size at compile time.
template <typename T, int kH>
void gemv_rows(const T* __restrict__ weight, const T* __restrict__ bias, const T* __restrict__ h, T* __restrict__ out,
               int64_t begin, int64_t end, int64_t H_runtime) {
  const int64_t H = kH > 0 ? kH : H_runtime;
  for (int64_t n = begin; n < end; ++n) {
    const T* w = weight + n * H;
    T acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int64_t k = 0; k < H; ++k) acc += w[k] * h[k];
    out[n] = acc + bias[n];
  }
}

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

at::Tensor hyper_generate_cpu(const at::Tensor& hidden_in, const at::Tensor& weight_in, const at::Tensor& bias_in,
                              at::IntArrayRef offsets) {
  check_inputs(hidden_in, weight_in, offsets, "hyper_generate");
  // The inner ATen calls are implementation details: keep autograd out of them.
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  TORCH_CHECK(bias_in.dim() == 1 && bias_in.size(0) == weight_in.size(0),
              "hyper_generate: bias must be [N] with N = weight rows");
  TORCH_CHECK(bias_in.scalar_type() == weight_in.scalar_type(), "hyper_generate: bias must share weight's dtype");
  const auto hidden = hidden_in.contiguous();
  const auto weight = weight_in.contiguous();
  const auto bias = bias_in.contiguous();
  const int64_t B = hidden.size(0), N = weight.size(0);
  auto out = at::empty({B, N}, weight.options());
  if (B == 0 || N == 0) return out;
  const auto chunks = make_chunks(offsets);
  const int64_t H = hidden.size(2);
  if (B == 1 && (weight.scalar_type() == at::kFloat || weight.scalar_type() == at::kDouble)) {
    AT_DISPATCH_FLOATING_TYPES(weight.scalar_type(), "hyper_generate_gemv", [&] {
      const scalar_t* w = weight.data_ptr<scalar_t>();
      const scalar_t* bp = bias.data_ptr<scalar_t>();
      const scalar_t* hp = hidden.data_ptr<scalar_t>();
      scalar_t* op = out.data_ptr<scalar_t>();
      at::parallel_for(0, static_cast<int64_t>(chunks.size()), 1, [&](int64_t cb, int64_t ce) {
        for (int64_t c = cb; c < ce; ++c) {
          const Chunk& ch = chunks[c];
          if (H == 32) {
            gemv_rows<scalar_t, 32>(w, bp, hp + ch.kernel * H, op, ch.begin, ch.end, H);
          } else {
            gemv_rows<scalar_t, 0>(w, bp, hp + ch.kernel * H, op, ch.begin, ch.end, H);
          }
        }
      });
    });
    return out;
  }
  at::parallel_for(0, static_cast<int64_t>(chunks.size()), 1, [&](int64_t cb, int64_t ce) {
    at::AutoDispatchBelowADInplaceOrView below_autograd_worker;  // TLS: worker threads need their own
    for (int64_t c = cb; c < ce; ++c) {
      const Chunk& ch = chunks[c];
      const int64_t R = ch.end - ch.begin;
      auto dst = out.narrow(1, ch.begin, R);
      at::addmm_out(dst, bias.narrow(0, ch.begin, R).unsqueeze(0), hidden.select(1, ch.kernel),
                    weight.narrow(0, ch.begin, R).t());
    }
  });
  return out;
}

// Gradients of hyper_generate: grad [B, N] -> (grad_hidden [B, L, H], grad_weight [N, H], grad_bias [N]).
std::tuple<at::Tensor, at::Tensor, at::Tensor> hyper_generate_backward_cpu(const at::Tensor& grad_in,
                                                                          const at::Tensor& hidden_in,
                                                                          const at::Tensor& weight_in,
                                                                          at::IntArrayRef offsets) {
  check_inputs(hidden_in, weight_in, offsets, "hyper_generate_backward");
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
  at::parallel_for(0, C, 1, [&](int64_t cb, int64_t ce) {
    at::AutoDispatchBelowADInplaceOrView below_autograd_worker;  // TLS: worker threads need their own
    for (int64_t c = cb; c < ce; ++c) {
      const Chunk& ch = chunks[c];
      const int64_t R = ch.end - ch.begin;
      const auto g = grad.narrow(1, ch.begin, R);  // [B, R]
      const auto h = hidden.select(1, ch.kernel);  // [B, H]
      auto gw = grad_weight.narrow(0, ch.begin, R);
      at::mm_out(gw, g.t(), h);
      auto p = partial.select(0, c);
      at::mm_out(p, g, weight.narrow(0, ch.begin, R));
    }
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
