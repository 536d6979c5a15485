// Helpers shared by the CPU kernels: parallel loops over elements and a strided walk for
// broadcasting. Kernel threads are OpenMP's, set on the interpreter's worker thread.
#pragma once

#include <cstdint>

#include "mtc/tensor.h"

namespace mtc::cpu {

// Below this many elements a loop runs on one thread: forking costs more.
inline constexpr int64_t kParallelGrain = 1 << 15;  // elements

// for_each_strided: calls f(out_index, a_offset, b_offset) for every element of `out`,
// row-major, with a and b read through their strides. One thread per outer slice.
template <typename F>
void for_each_strided(const Shape& out, const Shape& sa, const Shape& sb, F&& f) {
  const int nd = static_cast<int>(out.size());
  if (nd == 0) {
    f(0, 0, 0);
    return;
  }
  const int64_t inner = out[nd - 1];
  const int64_t outer = numel(out) / (inner == 0 ? 1 : inner);
  if (inner == 0) return;
#pragma omp parallel for if (outer * inner > kParallelGrain)
  for (int64_t o = 0; o < outer; ++o) {
    int64_t rem = o, ao = 0, bo = 0;
    for (int d = nd - 2; d >= 0; --d) {
      const int64_t idx = rem % out[d];
      rem /= out[d];
      ao += idx * sa[d];
      bo += idx * sb[d];
    }
    const int64_t as = sa[nd - 1], bs = sb[nd - 1];
    for (int64_t i = 0; i < inner; ++i) f(o * inner + i, ao + i * as, bo + i * bs);
  }
}

// first_out_of_range: the position of the first value outside [0, limit), or -1 (for
// kernels that index with i32 labels or indices).
inline int64_t first_out_of_range(const int32_t* v, int64_t n, int64_t limit) {
  for (int64_t i = 0; i < n; ++i) {
    if (v[i] < 0 || v[i] >= limit) return i;
  }
  return -1;
}

}  // namespace mtc::cpu
