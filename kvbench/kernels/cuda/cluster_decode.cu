// Paged decode attention whose KV splits combine inside a thread-block cluster (sm_90).
//
// Why this kernel exists (docs/perf-notes.md, experiments 5, 9, 15, 18): at batch 1 x 4k the
// Triton split-KV path is a split kernel plus a reduce kernel, and the reduce's launch and its
// dependent DRAM/L2 round trips cost ~3 us on top of the split kernel. Triton's `tl` gives a
// program no access to another program's shared memory, so the splits of one (sequence, kv
// head) cannot combine without a second kernel. Here they are the CTAs of one cluster: each
// CTA reduces its token range to a partial (max, sum, unnormalised output) in its own shared
// memory, a cluster barrier makes the partials visible, and every CTA combines a slice of the
// outputs by reading its peers' shared memory (DSMEM), then a second barrier keeps that memory
// alive until all peers are done reading.
//
// Structure of one CTA (8 warps, TILE_N = 128 tokens per stage, NSTAGE-deep cp.async ring):
//   * K rows are staged with 16 bytes of padding (272-byte stride) so the QK^T reads below,
//     one token per lane, hit distinct banks; V rows are read along d and need none.
//   * QK^T on CUDA cores: lane (t, half) of warp w owns token 16 w + t of the tile and half of
//     d; q (pre-scaled by sm_scale * log2 e, in fp32) is read from shared memory as broadcasts.
//     A decode group of <= 8 q heads is too narrow for tensor cores to matter at these sizes
//     (the kernel is bound by its chain of latencies, not by FLOPs).
//   * Online softmax per warp over its 16 tokens (shuffles within 16 lanes), no CTA barrier
//     per tile except the ring's; P goes to a per-warp shared-memory row, then P @ V with lane
//     l owning d in [4 l, 4 l + 4).
//   * After the last tile: the 8 warps' partials combine in shared memory (one CTA partial),
//     then the cluster combine above.
// Rows past seq_len are zero-filled by cp.async (src-size 0) and masked to -inf.
//
// Accepted inputs are checked in Python (kvbench/kernels/paged_decode_cuda.py) before launch:
// q [B, Hq, 128] fp16/bf16 (d contiguous); K and V token-major [pages, page_size, Hkv, 128] of
// q's dtype (d contiguous); block_table int32 [B, >= pages used]; seq_lens int32 [B];
// Hq / Hkv in {1, 2, 4, 8}; page_size a power of two; 1 <= splits <= 16.

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace cg = cooperative_groups;

namespace {

constexpr int HEAD_DIM = 128;
constexpr int WARPS = 8;
constexpr int THREADS = WARPS * 32;
constexpr int TILE_N = 16 * WARPS;              // tokens per stage: 16 per warp
constexpr int NSTAGE = 3;
constexpr int ROW_BYTES = HEAD_DIM * 2;         // one fp16/bf16 row of one kv head
constexpr int K_ROW_STRIDE = ROW_BYTES + 16;    // padded: 8 lanes of an LDS.128 phase, 8 banks groups
constexpr int V_ROW_STRIDE = ROW_BYTES;
constexpr int CHUNKS = ROW_BYTES / 16;          // 16-byte cp.async chunks per row
constexpr int ROWS_PER_PASS = THREADS / CHUNKS;
constexpr int PASSES = TILE_N / ROWS_PER_PASS;  // rows each thread copies per tile (K and V)
constexpr int K_STAGE_BYTES = TILE_N * K_ROW_STRIDE;
constexpr int V_STAGE_BYTES = TILE_N * V_ROW_STRIDE;
constexpr int STAGE_BYTES = K_STAGE_BYTES + V_STAGE_BYTES;
constexpr int MAX_GROUP = 8;
constexpr int MAX_SPLITS = 16;                  // non-portable cluster size limit on sm_90

static_assert(THREADS % CHUNKS == 0 && TILE_N % ROWS_PER_PASS == 0, "copy mapping");

}  // namespace

// Mirrored field by field by kvbench/kernels/paged_decode_cuda.py (ctypes.Structure): pointers,
// then int64, then int32 / float, so both sides lay it out the same way.
struct DecodeArgs {
  const void* q;
  const void* k;
  const void* v;
  const int32_t* block_table;
  const int32_t* seq_lens;
  void* out;
  int64_t q_stride_b, q_stride_h;
  int64_t k_stride_page, k_stride_slot, k_stride_head;
  int64_t v_stride_page, v_stride_slot, v_stride_head;
  int64_t bt_stride;
  int64_t out_stride_b, out_stride_h;
  int32_t batch, q_heads, kv_heads, page_shift, splits;
  float qk_scale_log2;  // sm_scale * log2(e)
};

namespace {

template <typename T>
struct Elem;

template <>
struct Elem<__half> {
  static __device__ __forceinline__ float2 pair(uint32_t w) {
    return __half22float2(*reinterpret_cast<const __half2*>(&w));
  }
  static __device__ __forceinline__ float one(const __half* p) { return __half2float(*p); }
  static __device__ __forceinline__ __half from(float x) { return __float2half_rn(x); }
};

template <>
struct Elem<__nv_bfloat16> {
  static __device__ __forceinline__ float2 pair(uint32_t w) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w));
  }
  static __device__ __forceinline__ float one(const __nv_bfloat16* p) { return __bfloat162float(*p); }
  static __device__ __forceinline__ __nv_bfloat16 from(float x) { return __float2bfloat16_rn(x); }
};

__device__ __forceinline__ float ex2(float x) {  // 2^x; -inf -> +0 (ftz is fine for weights)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int src_bytes) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem),
               "r"(src_bytes)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Shared memory besides the ring (floats).
template <int GROUP>
struct Side {
  static constexpr int Q = GROUP * HEAD_DIM;               // q * scale, fp32
  static constexpr int P = WARPS * 16 * GROUP;             // per-warp probabilities
  static constexpr int WML = 2 * WARPS * GROUP;            // per-warp max and sum
  static constexpr int PART = GROUP * HEAD_DIM + 2 * GROUP;  // the CTA partial: o, max, sum
  static constexpr int FLOATS = Q + P + WML + PART;
};

template <int GROUP>
constexpr int smem_bytes() {
  // The warps' partial outputs (WARPS x GROUP x HEAD_DIM floats) reuse the ring after the loop.
  static_assert(WARPS * GROUP * HEAD_DIM * 4 <= NSTAGE * STAGE_BYTES, "combine fits the ring");
  return NSTAGE * STAGE_BYTES + Side<GROUP>::FLOATS * 4;
}

template <typename T, int GROUP>
__global__ void __launch_bounds__(THREADS, 1) cluster_decode_kernel(const DecodeArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  float* q_s = reinterpret_cast<float*>(smem + NSTAGE * STAGE_BYTES);
  float* p_s = q_s + Side<GROUP>::Q;
  float* wml_s = p_s + Side<GROUP>::P;
  float* part_o = wml_s + Side<GROUP>::WML;
  float* part_ml = part_o + GROUP * HEAD_DIM;  // [0, GROUP): max, [GROUP, 2 GROUP): sum

  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int splits = static_cast<int>(cluster.num_blocks());
  const int hk = blockIdx.y;
  const int b = blockIdx.z;
  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int lane = tid & 31;

  const int seq_len = a.seq_lens[b];
  const int per_split = ((seq_len + splits - 1) / splits + 15) & ~15;
  const int start = min(seq_len, rank * per_split);
  const int end = min(seq_len, start + per_split);
  const int num_tiles = (end - start + TILE_N - 1) / TILE_N;
  const int32_t* bt_row = a.block_table + static_cast<int64_t>(b) * a.bt_stride;
  const int page_mask = (1 << a.page_shift) - 1;
  const char* k_base = static_cast<const char*>(a.k) + hk * a.k_stride_head * 2;
  const char* v_base = static_cast<const char*>(a.v) + hk * a.v_stride_head * 2;

  // Stage one tile: thread copies chunk (tid % CHUNKS) of rows tid / CHUNKS + j * ROWS_PER_PASS.
  // The rows' block-table entries are loaded a tile ahead of their copies (load_pages for
  // tile i + NSTAGE while tile i + NSTAGE - 1 is issued): a copy waiting on its entry would
  // stall the warp for a DRAM round trip before it reaches the math of the current tile.
  const int chunk = tid % CHUNKS;
  const int row0 = tid / CHUNKS;
  auto load_pages = [&](int tile, int* page) {
#pragma unroll
    for (int j = 0; j < PASSES; ++j) {
      const int tok = start + tile * TILE_N + row0 + j * ROWS_PER_PASS;
      page[j] = tok < end ? bt_row[tok >> a.page_shift] : 0;
    }
  };
  auto issue_tile = [&](int tile, const int* page) {
    unsigned char* ks = smem + (tile % NSTAGE) * STAGE_BYTES;
    unsigned char* vs = ks + K_STAGE_BYTES;
#pragma unroll
    for (int j = 0; j < PASSES; ++j) {
      const int row = row0 + j * ROWS_PER_PASS;
      const int tok = start + tile * TILE_N + row;
      const int bytes = tok < end ? 16 : 0;  // 0: zero-fill, nothing read
      const int64_t slot = tok & page_mask;
      const char* kp = k_base + (page[j] * a.k_stride_page + slot * a.k_stride_slot) * 2 + chunk * 16;
      const char* vp = v_base + (page[j] * a.v_stride_page + slot * a.v_stride_slot) * 2 + chunk * 16;
      cp_async16(ks + row * K_ROW_STRIDE + chunk * 16, kp, bytes);
      cp_async16(vs + row * V_ROW_STRIDE + chunk * 16, vp, bytes);
    }
  };

  {
    int pages[NSTAGE - 1][PASSES];
#pragma unroll
    for (int s = 0; s < NSTAGE - 1; ++s) load_pages(s, pages[s]);
#pragma unroll
    for (int s = 0; s < NSTAGE - 1; ++s) {
      if (s < num_tiles) issue_tile(s, pages[s]);
      cp_async_commit();
    }
  }
  int pages_ahead[PASSES];
  load_pages(NSTAGE - 1, pages_ahead);

  const T* q_row = static_cast<const T*>(a.q) + b * a.q_stride_b + (hk * GROUP) * a.q_stride_h;
  for (int i = tid; i < GROUP * HEAD_DIM; i += THREADS) {
    const int h = i / HEAD_DIM;
    q_s[i] = Elem<T>::one(q_row + h * a.q_stride_h + (i % HEAD_DIM)) * a.qk_scale_log2;
  }

  float m[GROUP], l[GROUP], acc[GROUP][4];
#pragma unroll
  for (int h = 0; h < GROUP; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.f;
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[h][j] = 0.f;
  }

  const int t = lane & 15;
  const int half_d = lane >> 4;
  float* p_warp = p_s + warp * 16 * GROUP;

  for (int i = 0; i < num_tiles; ++i) {
    cp_async_wait<NSTAGE - 2>();
    __syncthreads();  // tile i visible to all; every warp is done with the stage refilled next
    if (i + NSTAGE - 1 < num_tiles) issue_tile(i + NSTAGE - 1, pages_ahead);
    cp_async_commit();
    load_pages(i + NSTAGE, pages_ahead);

    const unsigned char* ks = smem + (i % NSTAGE) * STAGE_BYTES;
    const unsigned char* vs = ks + K_STAGE_BYTES;
    const int row = warp * 16 + t;
    const int tok = start + i * TILE_N + row;

    // scores of this lane's token, over its half of d
    float s[GROUP];
#pragma unroll
    for (int h = 0; h < GROUP; ++h) s[h] = 0.f;
    const uint4* krow = reinterpret_cast<const uint4*>(ks + row * K_ROW_STRIDE + half_d * (ROW_BYTES / 2));
#pragma unroll
    for (int c = 0; c < HEAD_DIM / 16; ++c) {
      const uint4 kw = krow[c];
      const float2 k0 = Elem<T>::pair(kw.x), k1 = Elem<T>::pair(kw.y);
      const float2 k2 = Elem<T>::pair(kw.z), k3 = Elem<T>::pair(kw.w);
#pragma unroll
      for (int h = 0; h < GROUP; ++h) {
        const float4* qp = reinterpret_cast<const float4*>(q_s + h * HEAD_DIM + half_d * (HEAD_DIM / 2) + c * 8);
        const float4 qa = qp[0], qb = qp[1];
        s[h] += qa.x * k0.x + qa.y * k0.y + qa.z * k1.x + qa.w * k1.y + qb.x * k2.x + qb.y * k2.y +
                qb.z * k3.x + qb.w * k3.y;
      }
    }

    float p[GROUP];
#pragma unroll
    for (int h = 0; h < GROUP; ++h) {
      float sc = s[h] + __shfl_xor_sync(0xffffffffu, s[h], 16);
      sc = tok < end ? sc : -INFINITY;
      float mt = sc;
#pragma unroll
      for (int off = 8; off > 0; off >>= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, off));
      const float m_new = fmaxf(m[h], mt);
      const float base = m_new == -INFINITY ? 0.f : m_new;
      const float alpha = ex2(m[h] - base);
      p[h] = ex2(sc - base);
      float ps = p[h];
#pragma unroll
      for (int off = 8; off > 0; off >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, off);
      l[h] = l[h] * alpha + ps;
      m[h] = m_new;
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[h][j] *= alpha;
    }
    if (half_d == 0) {
#pragma unroll
      for (int h = 0; h < GROUP; ++h) p_warp[t * GROUP + h] = p[h];
    }
    __syncwarp();

    // P @ V: lane owns d in [4 lane, 4 lane + 4)
#pragma unroll 4
    for (int tt = 0; tt < 16; ++tt) {
      const uint2 vw = *reinterpret_cast<const uint2*>(vs + (warp * 16 + tt) * V_ROW_STRIDE + lane * 8);
      const float2 v0 = Elem<T>::pair(vw.x), v1 = Elem<T>::pair(vw.y);
#pragma unroll
      for (int h = 0; h < GROUP; ++h) {
        const float ph = p_warp[tt * GROUP + h];
        acc[h][0] += ph * v0.x;
        acc[h][1] += ph * v0.y;
        acc[h][2] += ph * v1.x;
        acc[h][3] += ph * v1.y;
      }
    }
    __syncwarp();  // p_warp is rewritten by the next tile
  }

  // ---- the CTA's partial: combine its warps (the ring is free once every copy has landed)
  cp_async_wait<0>();
  __syncthreads();
  float* wacc = reinterpret_cast<float*>(smem);  // [WARPS][GROUP][HEAD_DIM]
#pragma unroll
  for (int h = 0; h < GROUP; ++h) {
    *reinterpret_cast<float4*>(wacc + (warp * GROUP + h) * HEAD_DIM + 4 * lane) =
        make_float4(acc[h][0], acc[h][1], acc[h][2], acc[h][3]);
    if (lane == 0) {
      wml_s[warp * GROUP + h] = m[h];
      wml_s[(WARPS + warp) * GROUP + h] = l[h];
    }
  }
  __syncthreads();
  for (int o = tid; o < GROUP * HEAD_DIM; o += THREADS) {
    const int h = o / HEAD_DIM;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) mx = fmaxf(mx, wml_s[w * GROUP + h]);
    const float base = mx == -INFINITY ? 0.f : mx;
    float sum_o = 0.f, sum_l = 0.f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) {
      const float wgt = ex2(wml_s[w * GROUP + h] - base);
      sum_o += wgt * wacc[(w * GROUP) * HEAD_DIM + o];
      sum_l += wgt * wml_s[(WARPS + w) * GROUP + h];
    }
    part_o[o] = sum_o;
    if (o % HEAD_DIM == 0) {
      part_ml[h] = mx;
      part_ml[GROUP + h] = sum_l;
    }
  }

  // ---- the cluster's combine: every CTA finishes a slice of the outputs from all partials
  cluster.sync();  // release/acquire at cluster scope: peers' partials are visible
  T* out_row = static_cast<T*>(a.out) + b * a.out_stride_b + (hk * GROUP) * a.out_stride_h;
  for (int o = rank + splits * tid; o < GROUP * HEAD_DIM; o += splits * THREADS) {
    const int h = o / HEAD_DIM;
    float mx = -INFINITY, num = 0.f, den = 0.f;
#pragma unroll 4
    for (int r = 0; r < splits; ++r) {
      const float* peer_o = cluster.map_shared_rank(part_o, r);
      const float* peer_ml = cluster.map_shared_rank(part_ml, r);
      const float pm = peer_ml[h];
      const float m_new = fmaxf(mx, pm);
      const float base = m_new == -INFINITY ? 0.f : m_new;
      const float sa = ex2(mx - base), sb = ex2(pm - base);
      num = num * sa + peer_o[o] * sb;
      den = den * sa + peer_ml[GROUP + h] * sb;
      mx = m_new;
    }
    out_row[h * a.out_stride_h + (o % HEAD_DIM)] = Elem<T>::from(den > 0.f ? num / den : 0.f);
  }
  cluster.sync();  // peers may still read this CTA's partial
}

template <typename T, int GROUP>
cudaError_t configure(const DecodeArgs& a, cudaStream_t stream, cudaLaunchConfig_t* cfg,
                      cudaLaunchAttribute* attr) {
  constexpr int smem = smem_bytes<GROUP>();
  // Once per instantiation: the ring needs more than the default 48 KB of dynamic shared
  // memory, and clusters of 16 (one per kv head at batch 1 on 132 SMs) are non-portable.
  static const cudaError_t configured = [] {
    auto kernel = cluster_decode_kernel<T, GROUP>;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  }();
  *cfg = cudaLaunchConfig_t{};
  cfg->gridDim = dim3(a.splits, a.kv_heads, a.batch);
  cfg->blockDim = dim3(THREADS, 1, 1);
  cfg->dynamicSmemBytes = smem;
  cfg->stream = stream;
  attr->id = cudaLaunchAttributeClusterDimension;
  attr->val.clusterDim.x = a.splits;
  attr->val.clusterDim.y = 1;
  attr->val.clusterDim.z = 1;
  cfg->attrs = attr;
  cfg->numAttrs = 1;
  return configured;
}

template <typename T, int GROUP>
cudaError_t run(const DecodeArgs& a, cudaStream_t stream, int* max_clusters) {
  cudaLaunchConfig_t cfg;
  cudaLaunchAttribute attr;
  cudaError_t e = configure<T, GROUP>(a, stream, &cfg, &attr);
  if (e != cudaSuccess) return e;
  if (max_clusters != nullptr) {
    return cudaOccupancyMaxActiveClusters(max_clusters, cluster_decode_kernel<T, GROUP>, &cfg);
  }
  return cudaLaunchKernelEx(&cfg, cluster_decode_kernel<T, GROUP>, a);
}

template <typename T>
cudaError_t run_group(const DecodeArgs& a, cudaStream_t stream, int* max_clusters) {
  switch (a.q_heads / a.kv_heads) {
    case 1: return run<T, 1>(a, stream, max_clusters);
    case 2: return run<T, 2>(a, stream, max_clusters);
    case 4: return run<T, 4>(a, stream, max_clusters);
    case 8: return run<T, 8>(a, stream, max_clusters);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t dispatch(const DecodeArgs* a, int dtype, void* stream, int* max_clusters) {
  if (a == nullptr || a->kv_heads < 1 || a->q_heads % a->kv_heads != 0 || a->splits < 1 ||
      a->splits > MAX_SPLITS || (a->q_heads / a->kv_heads) > MAX_GROUP) {
    return cudaErrorInvalidValue;
  }
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (dtype == 0) return run_group<__half>(*a, s, max_clusters);
  if (dtype == 1) return run_group<__nv_bfloat16>(*a, s, max_clusters);
  return cudaErrorInvalidValue;
}

}  // namespace

// ---- the C interface loaded by ctypes (dtype: 0 fp16, 1 bf16; returns a cudaError_t)

extern "C" int kvb_cluster_decode(const DecodeArgs* a, int dtype, void* stream) {
  return static_cast<int>(dispatch(a, dtype, stream, nullptr));
}

// How many clusters of a->splits CTAs fit on the device at once (a->batch and grid unused).
extern "C" int kvb_max_active_clusters(const DecodeArgs* a, int dtype, int* out) {
  return static_cast<int>(dispatch(a, dtype, nullptr, out));
}

extern "C" const char* kvb_error_string(int code) {
  return cudaGetErrorString(static_cast<cudaError_t>(code));
}

extern "C" int kvb_args_size() { return static_cast<int>(sizeof(DecodeArgs)); }
