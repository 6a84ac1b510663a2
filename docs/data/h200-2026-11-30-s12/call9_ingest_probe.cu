// Session 12 probe: how fast can one SM pull bytes from HBM into shared memory, by copy kind?
// Each CTA reads its own contiguous `bytes_per_cta` into a ring of NST stages of STAGE bytes
// (the cluster decode's ring: 3 x 64 KiB), waiting for stage i before refilling it, and reads
// one word per thread of every stage (so the copies are consumed).
//   kind 0: cp.async 16 B per thread (LDGSTS, what cluster_decode does)
//   kind 1: cp.async.bulk (TMA, 1D) of `chunk` bytes, issued by thread 0, one mbarrier per stage
//   kind 2: cp.async.bulk of `chunk` bytes, issued by every thread (STAGE / chunk copies spread)
//   kind 3: empty kernel (the timer's floor)
#include <cuda_runtime.h>
#include <cstdint>

namespace {
constexpr int THREADS = 256;
constexpr int NST = 3;
constexpr int STAGE = 64 * 1024;

__device__ __forceinline__ uint32_t saddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void bar_init(uint32_t bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void bar_expect(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
      ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}
__device__ __forceinline__ void bar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      " @!p bra W;\n}\n" ::"r"(bar), "r"(parity) : "memory");
}

__global__ void __launch_bounds__(THREADS, 1)
probe_kernel(const unsigned char* src, long long bytes_per_cta, int kind, int chunk, float* out) {
  if (kind == 3) return;
  extern __shared__ __align__(128) unsigned char smem[];
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + NST * STAGE);
  const unsigned char* base = src + blockIdx.x * bytes_per_cta;
  const int stages = static_cast<int>(bytes_per_cta / STAGE);
  const int tid = threadIdx.x;
  float acc = 0.f;
  if (kind == 0) {
    auto issue = [&](int s) {
      const uint32_t dst = saddr(smem + (s % NST) * STAGE);
      const unsigned char* g = base + static_cast<long long>(s) * STAGE;
#pragma unroll
      for (int j = 0; j < STAGE / (16 * THREADS); ++j) {
        const int off = (j * THREADS + tid) * 16;
        cp16(dst + off, g + off);
      }
    };
    for (int s = 0; s < NST - 1; ++s) {
      if (s < stages) issue(s);
      asm volatile("cp.async.commit_group;" ::: "memory");
    }
    for (int i = 0; i < stages; ++i) {
      asm volatile("cp.async.wait_group %0;" ::"n"(NST - 2) : "memory");
      __syncthreads();
      if (i + NST - 1 < stages) issue(i + NST - 1);
      asm volatile("cp.async.commit_group;" ::: "memory");
      acc += reinterpret_cast<const float*>(smem + (i % NST) * STAGE)[tid * 64];
    }
  } else {
    if (tid == 0) {
      for (int s = 0; s < NST; ++s) bar_init(saddr(bars + s));
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    const int copies = STAGE / chunk;
    auto issue = [&](int s) {
      const uint32_t bar = saddr(bars + (s % NST));
      const uint32_t dst = saddr(smem + (s % NST) * STAGE);
      const unsigned char* g = base + static_cast<long long>(s) * STAGE;
      if (tid == 0) bar_expect(bar, STAGE);
      if (kind == 1) {
        if (tid == 0)
          for (int c = 0; c < copies; ++c) bulk(dst + c * chunk, g + c * chunk, chunk, bar);
      } else {
        __syncthreads();  // the expect_tx before any byte can complete
        for (int c = tid; c < copies; c += THREADS) bulk(dst + c * chunk, g + c * chunk, chunk, bar);
      }
    };
    for (int s = 0; s < NST - 1; ++s)
      if (s < stages) issue(s);
    for (int i = 0; i < stages; ++i) {
      __syncthreads();  // every thread done reading the stage refilled next
      if (i + NST - 1 < stages) {
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        issue(i + NST - 1);
      }
      bar_wait(saddr(bars + (i % NST)), (i / NST) & 1);
      acc += reinterpret_cast<const float*>(smem + (i % NST) * STAGE)[tid * 64];
    }
  }
  if (acc == 12345.f) out[blockIdx.x] = acc;  // keeps the reads; never true for the data used
}

// kind 4 (its own kernel): the decode's access pattern. CTA (head h, split s) of 8 heads reads
// the K and V rows of its tokens: token t's 256-byte row of head h at page ids[t / 16], slot
// t % 16 (page: 16 tokens x 8 heads x 256 B = 32 KiB), as cluster_decode's copies do (16 threads
// per row, 16 rows per pass, a 128-token tile = 64 KiB per stage, the page ids loaded first).
__global__ void __launch_bounds__(THREADS, 1)
paged_kernel(const unsigned char* k, const unsigned char* v, const int* ids, int tokens_per_cta,
             int splits, float* out) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int h = blockIdx.x / splits, sp = blockIdx.x % splits;
  const int tid = threadIdx.x, kc = tid % 16, kr0 = tid / 16;
  const int t_start = sp * tokens_per_cta;
  const int tiles = tokens_per_cta / 128;
  float acc = 0.f;
  auto issue = [&](int tile) {
    const uint32_t ks = saddr(smem + (tile % NST) * STAGE), vs = ks + STAGE / 2;
    int page[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) page[j] = ids[(t_start + tile * 128 + kr0 + 16 * j) >> 4];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int row = kr0 + 16 * j, slot = (t_start + tile * 128 + row) & 15;
      const long long off = static_cast<long long>(page[j]) * 32768 + slot * 2048 + h * 256 + kc * 16;
      cp16(ks + row * 256 + kc * 16, k + off);
      cp16(vs + row * 256 + kc * 16, v + off);
    }
  };
  for (int s = 0; s < NST - 1; ++s) {
    if (s < tiles) issue(s);
    asm volatile("cp.async.commit_group;" ::: "memory");
  }
  for (int i = 0; i < tiles; ++i) {
    asm volatile("cp.async.wait_group %0;" ::"n"(NST - 2) : "memory");
    __syncthreads();
    if (i + NST - 1 < tiles) issue(i + NST - 1);
    asm volatile("cp.async.commit_group;" ::: "memory");
    acc += reinterpret_cast<const float*>(smem + (i % NST) * STAGE)[tid * 64];
  }
  if (acc == 12345.f) out[blockIdx.x] = acc;
}
}  // namespace

extern "C" int probe(int kind, const void* src, long long bytes_per_cta, int n_ctas, int chunk,
                     float* out, void* stream) {
  const int smem = NST * STAGE + NST * 8;
  cudaError_t e = cudaFuncSetAttribute(probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return static_cast<int>(e);
  probe_kernel<<<n_ctas, THREADS, smem, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const unsigned char*>(src), bytes_per_cta, kind, chunk, out);
  return static_cast<int>(cudaGetLastError());
}

extern "C" int probe_paged(const void* k, const void* v, const int* ids, int tokens, int splits,
                           float* out, void* stream) {
  const int smem = NST * STAGE;
  cudaError_t e = cudaFuncSetAttribute(paged_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return static_cast<int>(e);
  paged_kernel<<<8 * splits, THREADS, smem, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const unsigned char*>(k), static_cast<const unsigned char*>(v), ids,
      tokens / splits, splits, out);
  return static_cast<int>(cudaGetLastError());
}
