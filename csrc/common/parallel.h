// How every compiled CPU kernel spreads work over torch's intra-op threads (issue 43): items taken from a
// shared counter, and no team at all for work too small to pay for one.
//
// Forking a team only pays where one thread would work for longer than a descheduled peer can delay the join:
// with another process on the cores a parallel region waits a scheduler slice (5-8 ms measured: the flips'
// 0.2 ms became 6 ms) for a thread that is not running, while on idle cores it saves at most half the work.
// So a call forks only when its estimated one-thread time is at least kMinParallelNs.
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <vector>

namespace invfast {
namespace parallel {

constexpr double kMinParallelNs = 2e6;
// the cost of a call that forks whatever its size (its cost per unit of work is not measured)
constexpr double kAlwaysFork = std::numeric_limits<double>::infinity();

// f(i, state) for every i in [0, n) on torch's intra-op threads, ``total_ns`` the estimated one-thread time of
// all n items, ``state = make()`` made once per thread (buffers an item reuses). Each thread takes the next item
// from a shared counter, so a thread that the OS deschedules delays the call by at most the item it holds, never
// by a fixed share of the work; one thread runs it all below kMinParallelNs (or inside a parallel region).
template <typename Make, typename F>
void run_items_with(int64_t n, double total_ns, const Make& make, const F& f) {
  if (n <= 0) return;
  const int64_t threads = std::min<int64_t>(at::get_num_threads(), n);
  if (threads <= 1 || total_ns < kMinParallelNs || at::in_parallel_region()) {
    auto state = make();
    for (int64_t i = 0; i < n; ++i) f(i, state);
    return;
  }
  std::atomic<int64_t> next{0};
  at::parallel_for(0, threads, 1, [&](int64_t, int64_t) {
    auto state = make();
    for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) f(i, state);
  });
}

// run_items_with whose per-thread state is a float buffer of ``scratch_floats``: f(i, float* scratch).
template <typename F>
void run_items(int64_t n, double total_ns, int64_t scratch_floats, const F& f) {
  run_items_with(
      n, total_ns, [&] { return std::vector<float>(static_cast<size_t>(std::max<int64_t>(scratch_floats, 1))); },
      [&](int64_t i, std::vector<float>& scratch) { f(i, scratch.data()); });
}

// the estimated one-thread time of ``items`` items of ``units`` units of work each at ``ns_per_unit``
inline double cost(int64_t items, int64_t units, double ns_per_unit) {
  return static_cast<double>(items) * static_cast<double>(units) * ns_per_unit;
}

}  // namespace parallel
}  // namespace invfast
