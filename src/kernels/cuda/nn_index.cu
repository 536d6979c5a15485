// Kernels driven by i32 indices: the range check shared by cross_entropy's labels and
// embedding's indices, embedding's row gather, and its gradient. The gradient must add
// each table row's dy rows in position order (the CPU's stable counting sort does so), so
// float atomics are out: the (index, position) pairs are sorted as 64-bit keys, which are
// all distinct, so any correct sort is stable. The sort is bitonic: tiles of kTile keys
// in shared memory, then the merge steps whose partners lie in other tiles over global
// memory, each followed by the rest of its merge back in shared memory.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/nn_index_launch.h"

namespace mtc::cuda {
namespace {

constexpr unsigned long long kNone = ~0ULL;
constexpr uint64_t kPad = ~uint64_t{0};  // sorts after every real key
constexpr int64_t kTile = 2048;          // keys per shared-memory tile (kTile / 2 threads)

// check_kernel: *first = the smallest position holding a value outside [0, limit)
// (atomicMin: the answer does not depend on the order threads run in).
__global__ void check_kernel(const int32_t* __restrict__ v, int64_t n, int64_t limit,
                             unsigned long long* __restrict__ first) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (v[i] < 0 || v[i] >= limit) {
      atomicMin(first, static_cast<unsigned long long>(i));
      return;  // later positions of this thread are larger
    }
  }
}

__global__ void gather_rows_kernel(const float* __restrict__ w, int64_t rows, int64_t d,
                                   const int32_t* __restrict__ idx, int64_t n, int64_t offset,
                                   float* __restrict__ y) {
  const int64_t total = n * d;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e / d, k = e - i * d;
    const int64_t r = idx[i] - offset;
    y[e] = r >= 0 && r < rows ? w[r * d + k] : 0.f;
  }
}

// init_keys: keys[i] = (row << 32) | i for i < n, row = idx[i] - offset; padding up to
// p, and for a row outside [0, vocab) (another vocabulary shard's): those sort last and
// fall outside every row's range.
__global__ void init_keys_kernel(const int32_t* __restrict__ idx, int64_t n, int64_t offset, int64_t vocab,
                                 int64_t p, uint64_t* __restrict__ keys) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < p;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i < n ? idx[i] - offset : -1;
    keys[i] = r >= 0 && r < vocab ? (static_cast<uint64_t>(r) << 32) | static_cast<uint64_t>(i) : kPad;
  }
}

// compare_swap: orders keys i < l ascending when asc, else descending.
__device__ void compare_swap(uint64_t* s, int64_t i, int64_t l, bool asc) {
  const uint64_t a = s[i], b = s[l];
  if ((a > b) == asc) {
    s[i] = b;
    s[l] = a;
  }
}

// lower_of_pair: the lower index of compare pair t at distance j (its bit j is clear).
__device__ int64_t lower_of_pair(int64_t t, int64_t j) { return t / j * 2 * j + t % j; }

// tile_steps: bitonic steps j = j0, j0 / 2, ..., 1 of stage k on the block's tile in
// shared memory (blockDim.x = tile / 2 threads, one pair each); directions follow the
// global index, as the whole-array network has them.
__device__ void tile_steps(uint64_t* s, int64_t base, int64_t k, int64_t j0) {
  for (int64_t j = j0; j > 0; j >>= 1) {
    const int64_t i = lower_of_pair(threadIdx.x, j);
    compare_swap(s, i, i + j, ((base + i) & k) == 0);
    __syncthreads();
  }
}

// bitonic_tile_sort: stages k = 2 .. tile, whole, on each tile.
__global__ void bitonic_tile_sort_kernel(uint64_t* __restrict__ keys, int64_t tile) {
  extern __shared__ uint64_t s[];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * tile;
  for (int64_t i = threadIdx.x; i < tile; i += blockDim.x) s[i] = keys[base + i];
  __syncthreads();
  for (int64_t k = 2; k <= tile; k <<= 1) tile_steps(s, base, k, k >> 1);
  for (int64_t i = threadIdx.x; i < tile; i += blockDim.x) keys[base + i] = s[i];
}

// bitonic_tile_merge: the steps j = tile / 2 .. 1 of stage k (> tile) on each tile.
__global__ void bitonic_tile_merge_kernel(uint64_t* __restrict__ keys, int64_t tile, int64_t k) {
  extern __shared__ uint64_t s[];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * tile;
  for (int64_t i = threadIdx.x; i < tile; i += blockDim.x) s[i] = keys[base + i];
  __syncthreads();
  tile_steps(s, base, k, tile >> 1);
  for (int64_t i = threadIdx.x; i < tile; i += blockDim.x) keys[base + i] = s[i];
}

// bitonic_global_step: step j (>= tile, partners in other tiles) of stage k over all p keys.
__global__ void bitonic_global_step_kernel(uint64_t* __restrict__ keys, int64_t p, int64_t j, int64_t k) {
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < p / 2;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = lower_of_pair(t, j);
    compare_swap(keys, i, i + j, (i & k) == 0);
  }
}

// row_starts: starts[v] = the first sorted position whose index is >= v, v in [0, vocab].
__global__ void row_starts_kernel(const uint64_t* __restrict__ keys, int64_t n, int64_t vocab,
                                  int64_t* __restrict__ starts) {
  for (int64_t v = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; v <= vocab;
       v += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t key = static_cast<uint64_t>(v) << 32;
    int64_t lo = 0, hi = n;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (keys[mid] < key) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    starts[v] = lo;
  }
}

// accumulate: dw[v, k] = 0.f + dy[p0, k] + dy[p1, k] + ... over v's positions in order.
__global__ void accumulate_kernel(const uint64_t* __restrict__ keys, const int64_t* __restrict__ starts,
                                  const float* __restrict__ dy, int64_t d, int64_t vocab,
                                  float* __restrict__ dw) {
  const int64_t total = vocab * d;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t v = e / d, k = e - v * d;
    float acc = 0.f;
    for (int64_t q = starts[v]; q < starts[v + 1]; ++q) {
      const int64_t pos = static_cast<int64_t>(keys[q] & 0xffffffffULL);
      acc += dy[pos * d + k];
    }
    dw[e] = acc;
  }
}

// padded: the power of two the sort runs over (at least 1).
int64_t padded(int64_t n) {
  int64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

}  // namespace

cudaError_t find_out_of_range(const int32_t* v, int64_t n, int64_t limit, void* scratch, int64_t* position,
                              int32_t* value, cudaStream_t stream) {
  *position = -1;
  if (n <= 0) return cudaSuccess;
  auto* first = static_cast<unsigned long long*>(scratch);
  unsigned long long found = kNone;
  cudaMemsetAsync(first, 0xff, sizeof(found), stream);  // kNone
  check_kernel<<<blocks(n), 256, 0, stream>>>(v, n, limit, first);
  cudaMemcpyAsync(&found, first, sizeof(found), cudaMemcpyDeviceToHost, stream);
  // An error of any step above is sticky or returned by the synchronisation.
  cudaError_t e = cudaStreamSynchronize(stream);
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e != cudaSuccess || found == kNone) return e;
  *position = static_cast<int64_t>(found);
  cudaMemcpyAsync(value, v + found, sizeof(int32_t), cudaMemcpyDeviceToHost, stream);
  e = cudaStreamSynchronize(stream);
  return e == cudaSuccess ? cudaGetLastError() : e;
}

void launch_gather_rows(const float* w, int64_t rows, int64_t d, const int32_t* idx, int64_t n, int64_t offset,
                        float* y, cudaStream_t stream) {
  if (n <= 0 || d <= 0) return;
  gather_rows_kernel<<<blocks(n * d), 256, 0, stream>>>(w, rows, d, idx, n, offset, y);
}

size_t embedding_grad_scratch_bytes(int64_t n, int64_t vocab) {
  return sizeof(uint64_t) * static_cast<size_t>(padded(n)) + sizeof(int64_t) * static_cast<size_t>(vocab + 1);
}

void launch_embedding_grad(const int32_t* idx, int64_t n, int64_t offset, const float* dy, int64_t d, int64_t vocab,
                           float* dw, void* scratch, cudaStream_t stream) {
  if (vocab <= 0 || d <= 0) return;
  const int64_t p = padded(n);
  auto* keys = static_cast<uint64_t*>(scratch);
  auto* starts = reinterpret_cast<int64_t*>(keys + p);
  init_keys_kernel<<<blocks(p), 256, 0, stream>>>(idx, n, offset, vocab, p, keys);
  if (p >= 2) {
    const int64_t tile = p < kTile ? p : kTile;
    const unsigned tiles = static_cast<unsigned>(p / tile), threads = static_cast<unsigned>(tile / 2);
    const size_t shared = sizeof(uint64_t) * static_cast<size_t>(tile);
    bitonic_tile_sort_kernel<<<tiles, threads, shared, stream>>>(keys, tile);
    for (int64_t k = 2 * tile; k <= p; k <<= 1) {
      for (int64_t j = k >> 1; j >= tile; j >>= 1) {
        bitonic_global_step_kernel<<<blocks(p / 2), 256, 0, stream>>>(keys, p, j, k);
      }
      bitonic_tile_merge_kernel<<<tiles, threads, shared, stream>>>(keys, tile, k);
    }
  }
  row_starts_kernel<<<blocks(vocab + 1), 256, 0, stream>>>(keys, n, vocab, starts);
  accumulate_kernel<<<blocks(vocab * d), 256, 0, stream>>>(keys, starts, dy, d, vocab, dw);
}

}  // namespace mtc::cuda
