// Paged decode attention whose KV splits combine inside a thread-block cluster (sm_90).
//
// Why this kernel exists (docs/decisions.md): at small batch the Triton split-KV path is a
// split kernel plus a reduce kernel, and the reduce's launch and its dependent DRAM/L2 round
// trips are a large share of a call that lasts microseconds. Triton's `tl` gives a
// program no access to another program's shared memory, so the splits of one (sequence, kv
// head) cannot combine without a second kernel. Here they are the CTAs of one cluster: each
// CTA reduces its token range to a partial (max, sum, unnormalised output) and pushes each
// output's value to the CTA that owns that output (st.async into the owner's shared memory,
// counted in bytes by the owner's mbarrier); each CTA waits for its own bytes only, combines its
// slice of the outputs and stores it. No cluster-wide barrier after the loop.
//
// Structure of one CTA (8 warps, TILE_N = 128 tokens per stage, a cp.async ring of NSTAGE):
//   * K and V rows are staged unpadded, XOR-swizzled by 16-byte chunk (Stage below), so a
//     warp's copy fills contiguous shared memory and ldmatrix's 8 row addresses per matrix hit
//     distinct banks.
//   * Each warp owns 16 of each tile's tokens (fp8: tokens [16 w, 16 w + 16); 16-bit: the rows
//     it copies, see warp_row in the kernel), on tensor cores (mma.sync m16n8k16, fp32
//     accumulate). 16-bit KV: S^T = K q^T and O^T += V^T P^T, the warp's 16 tokens (then
//     16 d) as the MMA's rows and the group's <= 8 q heads as its 8 columns; K through
//     ldmatrix, V through ldmatrix.trans, and P^T turned from S^T's accumulator into the B
//     operand by movmatrix.trans, in registers. fp8 KV: S = q K^T and O += P V, the q heads as
//     the 16 rows (the rest zero), so twice the MMAs per tile (its byte operands come from
//     ldmatrix in the layouts described below). CUDA cores alone (one token per lane) were
//     slower than Triton's tensor-core tiles (docs/decisions.md).
//   * Online softmax per warp over its 16 tokens, P in registers. At 16 bits a warp computes on
//     the rows it copies, so the warps run their loops without a CTA barrier; fp8 keeps one per
//     tile (its V^T chunks are copied across warps).
//   * After the last tile: the 8 warps' partials combine in shared memory (one CTA partial),
//     then the push and the owners' combine above.
// Rows past seq_len are zero-filled by cp.async (src-size 0) and masked to -inf.
//
// fp8 (e4m3 bytes, fp16 q): K rows token-major as above, V pages dim-major, so the P @ V
// operand is a byte row along tokens that ldmatrix reads whole; codes are widened to fp16 in
// registers (cvt.rn.f16x2.e4m3x2), k_scale folded into the score scale, v_scale into the output.
//
// Accepted inputs are checked in Python (kvbench/kernels/paged_decode_cluster.py) before launch:
// q [B, Hq, 128] fp16/bf16 (d contiguous); K and V token-major [pages, page_size, Hkv, 128] of
// q's dtype (d contiguous), or fp8 with V dim-major and page_size >= 16; block_table int32
// [B, >= pages used]; seq_lens int32 [B]; Hq / Hkv in {1, 2, 4, 8}; page_size a power of two;
// 1 <= splits <= 16.

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace cg = cooperative_groups;

namespace {

constexpr int HEAD_DIM = 128;
constexpr int WARPS = 8;
constexpr int THREADS = WARPS * 32;
constexpr int TILE_N = 16 * WARPS;              // tokens per stage: 16 per warp
constexpr int MAX_GROUP = 8;
constexpr int MAX_SPLITS = 16;                  // non-portable cluster size limit on sm_90

// One stage of the ring, by KV element, with no padding: a warp's cp.async of contiguous
// global bytes must land in contiguous shared memory, or the copy is split into smaller L2
// requests: padded rows (272 / 144 bytes) made the fp8 kernel issue about three times the L2
// requests per 128-byte line and run near the L2's tag-lookup limit (docs/decisions.md).
//   16-bit KV: K and V tiles [TILE_N tokens][HEAD_DIM], 256-byte rows (3 stages: 192 KiB).
//   fp8 KV: K [TILE_N tokens][HEAD_DIM bytes], 128-byte rows, and V^T as [TILE_N / 16 token
//   chunks][HEAD_DIM d][16 tokens] (dim-major V pages: the P @ V operand runs along tokens,
//   and sm_90 has no 8-bit ldmatrix.trans): a chunk is the 2 KiB image of one 16-token page
//   piece, 3 stages (96 KiB).
// Token rows are XOR-swizzled by 16-byte chunk (swizzled()), so the 8 row addresses of one
// ldmatrix 8x8 matrix fall in 8 distinct bank groups; V^T chunks need no swizzle (8
// consecutive d rows of a chunk are 128 contiguous bytes).
template <bool FP8>
struct Stage {
  static constexpr int NSTAGE = 3;
  static constexpr int ESZ = FP8 ? 1 : 2;                 // bytes per element
  static constexpr int ROW = HEAD_DIM * ESZ;              // one token's K (and 16-bit V) row
  static constexpr int K_BYTES = TILE_N * ROW;
  static constexpr int BYTES = 2 * K_BYTES;               // K, then V (or V^T): same size
  static constexpr int K_CHUNKS = ROW / 16;               // 16-byte copies per row
  static constexpr int K_PASSES = TILE_N * K_CHUNKS / THREADS;  // copies per thread per tile
  static constexpr int V_CHUNKS = TILE_N / 16;            // fp8: 16-token chunks of V^T
  static constexpr int V_PASSES = K_PASSES;               // fp8: V^T copies per thread
  static_assert(THREADS % K_CHUNKS == 0, "copy mapping");

  // Byte offset of 16-byte chunk c of token row r: chunks permuted within each 128 bytes.
  // The key is the row's place among the rows one ldmatrix matrix reads: 8 consecutive rows at
  // fp8; at 16 bits rows 2w + b + 16 j (j = 0-3 or 4-7, b = 0, 1: a warp's own rows, see the
  // kernel's warp_row), keyed b + 2 (j % 4).
  static __device__ __forceinline__ int swizzled(int r, int c) {
    const int key = FP8 ? (r & 7) : ((r & 1) | ((r >> 3) & 6));
    return r * ROW + ((c ^ key) << 4);
  }
};

}  // namespace

// Mirrored field by field by kvbench/kernels/paged_decode_cluster.py (ctypes.Structure): pointers,
// then int64, then int32 / float, so both sides lay it out the same way.
struct DecodeArgs {
  const void* q;
  const void* k;
  const void* v;
  const int32_t* block_table;
  const int32_t* seq_lens;
  void* out;
  const float* k_scale_ptr;  // fp8: device scalars, or nullptr to use k_scale / v_scale below
  const float* v_scale_ptr;
  int64_t q_stride_b, q_stride_h;
  int64_t k_stride_page, k_stride_slot, k_stride_head;
  int64_t v_stride_page, v_stride_slot, v_stride_head, v_stride_d;
  int64_t bt_stride;
  int64_t out_stride_b, out_stride_h;
  int32_t batch, q_heads, kv_heads, page_shift, splits;
  float qk_scale_log2;  // sm_scale * log2(e)
  float k_scale, v_scale;
};

namespace {

template <typename T>
struct Elem;

template <>
struct Elem<__half> {
  static __device__ __forceinline__ __half from(float x) { return __float2half_rn(x); }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
};

template <>
struct Elem<__nv_bfloat16> {
  static __device__ __forceinline__ __nv_bfloat16 from(float x) { return __float2bfloat16_rn(x); }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
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

// Shared memory besides the ring (floats). The receive buffer takes the peers' pushed partials
// (see the kernel's end): this CTA owns outputs o with o % splits == rank, so from each of the
// splits pushers it receives ceil(GROUP * HEAD_DIM / splits) output values (<= GROUP * HEAD_DIM /
// splits + 1 each, hence the + MAX_SPLITS) and the pusher's GROUP maxima and GROUP sums. It is
// not the ring: a peer may push while this CTA is still in its loop. The mbarrier that counts
// the pushed bytes comes last, 8-byte aligned.
template <int GROUP>
struct Side {
  static constexpr int WML = 2 * WARPS * GROUP;                 // per-warp max and sum
  static constexpr int RECV_O = GROUP * HEAD_DIM + MAX_SPLITS;  // [splits][slots] outputs
  static constexpr int RECV_ML = MAX_SPLITS * 2 * GROUP;        // [splits][max GROUP, sum GROUP]
  static constexpr int FLOATS = (WML + RECV_O + RECV_ML + 1) & ~1;  // even: the mbarrier's 8 bytes
  static constexpr int BYTES = FLOATS * 4 + 8;
};

template <int GROUP, typename S>
constexpr int smem_bytes() {
  // The warps' partial outputs (WARPS x GROUP x HEAD_DIM floats) reuse the ring after the loop.
  static_assert(WARPS * GROUP * HEAD_DIM * 4 <= S::NSTAGE * S::BYTES, "combine fits the ring");
  return S::NSTAGE * S::BYTES + Side<GROUP>::BYTES;
}

// The cluster address (shared::cluster window) of a shared::cta address in CTA `rank`.
__device__ __forceinline__ uint32_t cluster_addr(uint32_t cta_addr, int rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(cta_addr), "r"(rank));
  return r;
}

// A 4-byte store into a peer's shared memory whose bytes count toward that peer's mbarrier
// (`bar`, a cluster address in the same CTA): the complete_tx is a release at cluster scope, so
// the peer's acquire-wait on the barrier sees the value. Fire and forget for the pusher.
__device__ __forceinline__ void push_f32(uint32_t dst, float v, uint32_t bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%0], %1, [%2];"
               ::"r"(dst), "f"(v), "r"(bar) : "memory");
}

// Four e4m3 codes -> two f16x2 words: (c0, c1) and (c2, c3), exact (every e4m3 value is an
// fp16 value).
__device__ __forceinline__ void e4m3x4_to_f16x4(uint32_t w, uint32_t& lo, uint32_t& hi) {
  asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %2;\n"
      "cvt.rn.f16x2.e4m3x2 %0, l;\ncvt.rn.f16x2.e4m3x2 %1, h;\n}\n"
      : "=r"(lo), "=r"(hi) : "r"(w));
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8x8 16-bit matrices; lane i gives the address of row (i % 8) of matrix (i / 8).
__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// c += A (16 x 16, row; a[0..3] as ldmatrix_x4 gives them) * B (16 x 8, col), fp32 accumulate.
template <typename T>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// The same with A's rows 8-15 zero (the fp8 path: q's <= 8 heads as the rows), so a1 = a3 = 0
// and c[2], c[3] stay unused.
template <typename T>
__device__ __forceinline__ void mma_16816_top8(float (&c)[4], uint32_t a0, uint32_t a2,
                                               uint32_t b0, uint32_t b1) {
  const uint32_t a[4] = {a0, 0u, a2, 0u};
  mma_16816<T>(c, a, b0, b1);
}

// The transpose of an 8 x 8 16-bit matrix held one 32-bit pair per lane (row lane / 4, columns
// 2 (lane % 4) and + 1), in the same layout.
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}

template <typename T, bool FP8, int GROUP>
__global__ void __launch_bounds__(THREADS, 1) cluster_decode_kernel(const DecodeArgs a) {
  using S = Stage<FP8>;
  constexpr int NSTAGE = S::NSTAGE;
  // No static __shared__ anywhere in this kernel: static shared memory is placed before the
  // dynamic ring, which then starts 16 bytes in, and one 4-byte static int made every launch
  // measurably slower (docs/decisions.md). tests/test_paged_decode_cluster.py checks the PTX.
  extern __shared__ __align__(16) unsigned char smem[];
  float* wml_s = reinterpret_cast<float*>(smem + NSTAGE * S::BYTES);
  float* recv_o = wml_s + Side<GROUP>::WML;       // [splits][slots]
  float* recv_ml = recv_o + Side<GROUP>::RECV_O;  // [splits][2 GROUP]: maxima, then sums
  uint64_t* recv_bar = reinterpret_cast<uint64_t*>(wml_s + Side<GROUP>::FLOATS);

  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int splits = static_cast<int>(cluster.num_blocks());
  const int hk = blockIdx.y;
  const int b = blockIdx.z;
  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int lane = tid & 31;

  // This CTA's outputs (o % splits == rank) arrive from every CTA of the cluster as bytes on
  // recv_bar, which is armed here for all of them: the barrier's one arrival is this
  // expect_tx, so its phase completes when the last expected byte has landed. The peers push
  // only after the cluster barrier below, so they see the barrier initialised; the barrier is
  // split (arrive now, wait before the first push), so no CTA waits for it at its start.
  constexpr int OUTS = GROUP * HEAD_DIM;
  const int slots = (OUTS + splits - 1) / splits;  // outputs per pusher and owner, at most
  if (tid == 0) {
    const int owned = (OUTS - rank + splits - 1) / splits;
    const uint32_t bytes = static_cast<uint32_t>(splits * (owned + 2 * GROUP) * 4);
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(recv_bar)) : "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                 ::"r"(smem_addr(recv_bar)), "r"(bytes) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");

  const int seq_len = a.seq_lens[b];
  const int per_split = ((seq_len + splits - 1) / splits + 15) & ~15;
  const int start = min(seq_len, rank * per_split);
  const int end = min(seq_len, start + per_split);
  const int num_tiles = (end - start + TILE_N - 1) / TILE_N;
  const int32_t* bt_row = a.block_table + static_cast<int64_t>(b) * a.bt_stride;
  const int page_mask = (1 << a.page_shift) - 1;
  const char* k_base = static_cast<const char*>(a.k) + hk * a.k_stride_head * S::ESZ;
  const char* v_base = static_cast<const char*>(a.v) + hk * a.v_stride_head * S::ESZ;

  // Stage one tile. K (and 16-bit V) rows: thread copies chunk kc of rows kr0 + j * K_STEP,
  // zero-filled past seq_len. fp8 V^T: copy j of a thread is 16 tokens (one 16-byte chunk of
  // a d row; page_size >= 16) of chunk v8_chunk(j) and d row v8_row(j), the tokens past
  // seq_len zero-filled (0 x NaN would be NaN). Block-table entries are loaded a tile ahead of
  // their copies: a copy waiting on its entry would stall the warp for a DRAM round trip
  // before the math of the current tile.
  constexpr int K_STEP = THREADS / S::K_CHUNKS;
  constexpr int NPAGES = S::K_PASSES + (FP8 ? S::V_PASSES : 0);  // fp8: + each V copy's page
  const int kc = tid % S::K_CHUNKS, kr0 = tid / S::K_CHUNKS;
  // fp8 V^T copies in memory order: one warp-wide copy is 512 contiguous bytes of a page (a
  // dim-major page of one head is [128 d][page_size] bytes), landing in 512 contiguous bytes of
  // the V^T chunk at page_size 16. Lanes run over a page's chunks of one d row first (up to 8:
  // 128 bytes), then over d rows, then over runs of chunks.
  const int v8_run = min(S::V_CHUNKS, 1 << max(0, a.page_shift - 4));  // chunks per d row run
  auto v8_chunk = [&](int j) {
    const int c = j * THREADS + tid;
    return (c / (v8_run * HEAD_DIM)) * v8_run + c % v8_run;
  };
  auto v8_row = [&](int j) { return (j * THREADS + tid) / v8_run % HEAD_DIM; };
  // fp8 K rows are stored permuted within each 16-token group (see k8_tok below), so each
  // ldmatrix matrix reads 8 consecutive rows (the swizzle puts them in 8 distinct bank groups).
  auto k_smem_row = [](int row) {
    if constexpr (!FP8) return row;
    const int t = row & 15;
    return (row & ~15) | (8 * ((t >> 1) & 1) + 2 * (t >> 2) + (t & 1));
  };
  auto load_pages = [&](int tile, int* page) {
    const int t0 = start + tile * TILE_N;
#pragma unroll
    for (int j = 0; j < S::K_PASSES; ++j) {
      const int tok = t0 + kr0 + j * K_STEP;
      page[j] = tok < end ? bt_row[tok >> a.page_shift] : 0;
    }
    if constexpr (FP8) {
#pragma unroll
      for (int j = 0; j < S::V_PASSES; ++j) {
        const int tok = t0 + 16 * v8_chunk(j);
        page[S::K_PASSES + j] = tok < end ? bt_row[tok >> a.page_shift] : 0;
      }
    }
  };
  auto issue_tile = [&](int tile, const int* page) {
    unsigned char* ks = smem + (tile % NSTAGE) * S::BYTES;
    unsigned char* vs = ks + S::K_BYTES;
    const int t0 = start + tile * TILE_N;
#pragma unroll
    for (int j = 0; j < S::K_PASSES; ++j) {
      const int row = kr0 + j * K_STEP;
      const int tok = t0 + row;
      const int bytes = tok < end ? 16 : 0;  // 0: zero-fill, nothing read
      const int64_t slot = tok & page_mask;
      const int64_t k_off = (page[j] * a.k_stride_page + slot * a.k_stride_slot) * S::ESZ;
      cp_async16(ks + S::swizzled(k_smem_row(row), kc), k_base + k_off + kc * 16, bytes);
      if constexpr (!FP8) {
        const int64_t v_off = (page[j] * a.v_stride_page + slot * a.v_stride_slot) * 2;
        cp_async16(vs + S::swizzled(row, kc), v_base + v_off + kc * 16, bytes);
      }
    }
    if constexpr (FP8) {
#pragma unroll
      for (int j = 0; j < S::V_PASSES; ++j) {
        const int chunk = v8_chunk(j), d = v8_row(j);
        const int tok = t0 + 16 * chunk;
        const int bytes = max(0, min(16, end - tok));
        const int64_t src = page[S::K_PASSES + j] * a.v_stride_page +
                            (tok & page_mask) * a.v_stride_slot + d * a.v_stride_d;
        cp_async16(vs + (chunk * HEAD_DIM + d) * 16, v_base + src, bytes);
      }
    }
  };

  {
    int pages[NSTAGE - 1][NPAGES];
#pragma unroll
    for (int s = 0; s < NSTAGE - 1; ++s) load_pages(s, pages[s]);
#pragma unroll
    for (int s = 0; s < NSTAGE - 1; ++s) {
      if (s < num_tiles) issue_tile(s, pages[s]);
      cp_async_commit();
    }
  }
  int pages_ahead[NPAGES];
  load_pages(NSTAGE - 1, pages_ahead);

  // q, straight from global memory: for 16-bit KV the B operand of S^T = K q^T (column r =
  // lane / 4 a q head, columns >= GROUP zero), for fp8 the A operand of S = q K^T (row r; rows
  // >= GROUP and 8-15 zero): the same registers. 16-bit KV: d pairs 2 (lane % 4) and + 8 of
  // each 16-wide k step. fp8: the k step's d order is permuted to match what ldmatrix gives
  // from byte rows (lane % 4 holds d 4 (lane % 4) .. + 3 of each 16): d pairs 4 (lane % 4) and
  // + 2. A sum over d does not care about the order as long as q and K agree.
  const int r = lane >> 2;
  const int quad = lane & 3;
  uint32_t qa[HEAD_DIM / 16][2];
  {
    const T* q_row = static_cast<const T*>(a.q) + b * a.q_stride_b + (hk * GROUP + r) * a.q_stride_h;
    const int d0 = FP8 ? 4 * quad : 2 * quad;
    const int d1 = FP8 ? 4 * quad + 2 : 2 * quad + 8;
#pragma unroll
    for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
      const bool real = r < GROUP;
      qa[kk][0] = real ? *reinterpret_cast<const uint32_t*>(q_row + kk * 16 + d0) : 0u;
      qa[kk][1] = real ? *reinterpret_cast<const uint32_t*>(q_row + kk * 16 + d1) : 0u;
    }
  }
  float k_scale = 1.f, v_scale = 1.f;
  if constexpr (FP8) {
    k_scale = a.k_scale_ptr ? *a.k_scale_ptr : a.k_scale;
    v_scale = a.v_scale_ptr ? *a.v_scale_ptr : a.v_scale;
  }
  const float qk_scale = a.qk_scale_log2 * k_scale;

  // The running softmax state. 16-bit (tokens as the MMA's rows, see TokenRows below): this
  // lane's heads are 2 quad and 2 quad + 1 (m_run, l_run [0] and [1]), acc[mb] holds O^T at
  // d = 16 mb + r (+ 8 in [2], [3]); l_run is this lane's share of the sum, reduced over the
  // warp after the loop. fp8 (heads as the MMA's rows): this lane's head is r (m_run[0],
  // l_run[0]), acc[nb] holds its outputs at d = 8 nb + 2 quad + {0, 1}.
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
  float acc[HEAD_DIM / 8][4];
#pragma unroll
  for (int nb = 0; nb < HEAD_DIM / 8; ++nb) acc[nb][0] = acc[nb][1] = acc[nb][2] = acc[nb][3] = 0.f;

  // ldmatrix row addresses: matrix mi = lane / 8, row lane % 8.
  const int mi = lane >> 3;
  const int lr = lane & 7;
  // 16-bit: warp w computes on the token rows it copies itself (issue_tile: rows 2w and 2w + 1
  // of each 16-row group), so no warp reads a row another copied and the loop needs no CTA
  // barrier: the MMA's row rho (0-15) is tile row warp_row(rho). The 16
  // rows of an MMA need not be consecutive tokens; the mask below uses the same map.
  static_assert(FP8 || THREADS / S::K_CHUNKS == 16, "a 16-bit warp copies 2 rows of each 16");
  auto warp_row = [&](int rho) { return 2 * warp + (rho & 1) + 16 * (rho >> 1); };
  // 16-bit, K as the A operand (16 tokens x 16 d): m0 rows 0-7 / m1 8-15 at d + 0, m2 / m3 at
  // d + 8 (k_half: the 16-byte chunk of 8 d). V^T as the A operand (16 d x 16 tokens) through
  // ldmatrix.trans: m0 d + 0 / m1 d + 8 of rows 0-7, m2 / m3 of rows 8-15.
  const int k_tok = warp_row(((mi & 1) << 3) + lr);
  const int k_half = mi >> 1;
  const int v_tok = warp_row(((mi >> 1) << 3) + lr);
  const int v_half = mi & 1;
  const int row_r = warp_row(r), row_r8 = warp_row(r + 8);  // this lane's S^T rows' tokens
  // fp8: a matrix is 8 rows x 16 bytes. K: matrix mi = (n-block mi >> 1, k step 2 j + (mi & 1));
  // n-block nb's column n is token 4 (n >> 1) + (n & 1) + 2 nb, so that S's accumulator holds,
  // per lane, tokens 4 quad .. + 3 in the order P @ V's B operand (V^T rows) gives them; the
  // copy stored those tokens at rows 8 nb + n (k_smem_row).
  const int k8_tok = warp * 16 + 8 * (mi >> 1) + lr;

  for (int i = 0; i < num_tiles; ++i) {
    cp_async_wait<NSTAGE - 2>();
    if constexpr (FP8) {
      __syncthreads();  // tile i visible to all (rows and V^T chunks are copied across warps);
                        // every warp is done with the stage refilled next
    } else {
      __syncwarp();  // this warp's rows of tile i visible to its lanes; it alone reads them
    }
    if (i + NSTAGE - 1 < num_tiles) issue_tile(i + NSTAGE - 1, pages_ahead);
    cp_async_commit();
    load_pages(i + NSTAGE, pages_ahead);

    const uint32_t ks = smem_addr(smem + (i % NSTAGE) * S::BYTES);
    const uint32_t vs = ks + S::K_BYTES;
    const int tile_base = start + i * TILE_N;

    if constexpr (!FP8) {
      // TokenRows: S^T (rows: the warp's 16 tokens, columns: 8 head slots) = K q^T, then
      // O^T += V^T P^T, so the MMA's 16 rows are tokens and d, never padding; the 8 columns
      // hold the group's heads (4 of 8 used at the Llama-3-8B group). With heads as the rows
      // (the fp8 path below) 12 of 16 rows are zero at a group of 4 and each tile takes twice
      // the MMAs. The loop's math, not its copies, sets the tile's pace at batch 1, and it is
      // bound by its dependency chain's latency more than by MMA issue (docs/decisions.md).
      float st0[4] = {0.f, 0.f, 0.f, 0.f}, st1[4] = {0.f, 0.f, 0.f, 0.f};  // two chains
#pragma unroll
      for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
        uint32_t ka[4];
        ldmatrix_x4(ks + S::swizzled(k_tok, 2 * kk + k_half), ka);
        mma_16816<T>(kk & 1 ? st1 : st0, ka, qa[kk][0], qa[kk][1]);
      }
      // st[j]: MMA row r + 8 (j >> 1) (tile row row_r / row_r8), head 2 quad + (j & 1)
      float sv[4], mt[2];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int tok = tile_base + (j >> 1 ? row_r8 : row_r);
        sv[j] = tok < end ? (st0[j] + st1[j]) * qk_scale : -INFINITY;
      }
      mt[0] = fmaxf(sv[0], sv[2]);
      mt[1] = fmaxf(sv[1], sv[3]);
#pragma unroll
      for (int x = 4; x < 32; x <<= 1) {  // over the 8 lanes of this quad position
        mt[0] = fmaxf(mt[0], __shfl_xor_sync(0xffffffffu, mt[0], x));
        mt[1] = fmaxf(mt[1], __shfl_xor_sync(0xffffffffu, mt[1], x));
      }
      float alpha[2], pv[4];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float m_new = fmaxf(m_run[h], mt[h]);
        const float base = m_new == -INFINITY ? 0.f : m_new;
        alpha[h] = ex2(m_run[h] - base);
        pv[h] = ex2(sv[h] - base);
        pv[h + 2] = ex2(sv[h + 2] - base);
        l_run[h] = l_run[h] * alpha[h] + pv[h] + pv[h + 2];
        m_run[h] = m_new;
      }
#pragma unroll
      for (int mb = 0; mb < HEAD_DIM / 16; ++mb) {
        acc[mb][0] *= alpha[0];
        acc[mb][1] *= alpha[1];
        acc[mb][2] *= alpha[0];
        acc[mb][3] *= alpha[1];
      }
      // P^T (rounded to q's dtype, as the Triton kernels do) as the B operand: the accumulator
      // of tokens 0-7 (and 8-15) is an 8 x 8 (token, head) matrix in ldmatrix's fragment
      // layout; its transpose in registers is exactly B's (k = token, n = head) fragment.
      const uint32_t pb0 = movmatrix_trans(Elem<T>::pack(pv[0], pv[1]));
      const uint32_t pb1 = movmatrix_trans(Elem<T>::pack(pv[2], pv[3]));
#pragma unroll
      for (int mb = 0; mb < HEAD_DIM / 16; ++mb) {
        uint32_t va[4];
        ldmatrix_x4_trans(vs + S::swizzled(v_tok, 2 * mb + v_half), va);
        mma_16816<T>(acc[mb], va, pb0, pb1);
      }
    } else {
      // S (rows: q heads, columns: this warp's 16 tokens) = q K^T on tensor cores
      float sc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
      for (int j = 0; j < HEAD_DIM / 32; ++j) {
        uint32_t kb[4];
        ldmatrix_x4(ks + S::swizzled(k8_tok, 2 * j + (mi & 1)), kb);
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          uint32_t b0, b1;
          e4m3x4_to_f16x4(kb[m], b0, b1);
          const int kk = 2 * j + (m & 1);
          mma_16816_top8<T>(sc[m >> 1], qa[kk][0], qa[kk][1], b0, b1);
        }
      }

      // online softmax of row r over the 16 tokens (4 per lane, the quad's lanes share a
      // row); sv[j] is token 4 quad + 2 (j >> 1) + (j & 1)
      float sv[4] = {sc[0][0], sc[0][1], sc[1][0], sc[1][1]};
      float mt = -INFINITY;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int tok = tile_base + warp * 16 + 4 * quad + 2 * (j >> 1) + (j & 1);
        sv[j] = tok < end ? sv[j] * qk_scale : -INFINITY;
        mt = fmaxf(mt, sv[j]);
      }
      mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
      mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 2));
      const float m_new = fmaxf(m_run[0], mt);
      const float base = m_new == -INFINITY ? 0.f : m_new;
      const float alpha = ex2(m_run[0] - base);
      float pv[4], ps = 0.f;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        pv[j] = ex2(sv[j] - base);
        ps += pv[j];
      }
      ps += __shfl_xor_sync(0xffffffffu, ps, 1);
      ps += __shfl_xor_sync(0xffffffffu, ps, 2);
      l_run[0] = l_run[0] * alpha + ps;
      m_run[0] = m_new;
#pragma unroll
      for (int nb = 0; nb < HEAD_DIM / 8; ++nb) {
        acc[nb][0] *= alpha;
        acc[nb][1] *= alpha;
      }

      // P (rounded to q's dtype, as the Triton kernels do) is S's accumulator layout = P @ V's
      // A operand: a0 = sv[0..1], a2 = sv[2..3] (their tokens match the B operand's k order).
      // V^T rows d, the warp's 16 token bytes: one matrix = one n-block (8 d) x 16 tokens.
      const uint32_t pa0 = Elem<T>::pack(pv[0], pv[1]);
      const uint32_t pa2 = Elem<T>::pack(pv[2], pv[3]);
#pragma unroll
      for (int j = 0; j < HEAD_DIM / 32; ++j) {
        uint32_t vb[4];
        ldmatrix_x4(vs + (warp * HEAD_DIM + (4 * j + mi) * 8 + lr) * 16, vb);
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          uint32_t b0, b1;
          e4m3x4_to_f16x4(vb[m], b0, b1);
          mma_16816_top8<T>(acc[4 * j + m], pa0, pa2, b0, b1);
        }
      }
    }
  }

  // ---- the CTA's partial: combine its warps (the ring is free once every copy has landed)
  cp_async_wait<0>();
  __syncthreads();
  float* wacc = reinterpret_cast<float*>(smem);  // [WARPS][GROUP][HEAD_DIM]
  if constexpr (!FP8) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // this lane's share of the sum -> the warp's
#pragma unroll
      for (int x = 4; x < 32; x <<= 1) l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], x);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int head = 2 * quad + h;
      if (head < GROUP) {
        float* w = wacc + (warp * GROUP + head) * HEAD_DIM + r;
#pragma unroll
        for (int mb = 0; mb < HEAD_DIM / 16; ++mb) {
          w[16 * mb] = acc[mb][h];
          w[16 * mb + 8] = acc[mb][h + 2];
        }
        if (r == 0) {
          wml_s[warp * GROUP + head] = m_run[h];
          wml_s[(WARPS + warp) * GROUP + head] = l_run[h];
        }
      }
    }
  } else if (r < GROUP) {
#pragma unroll
    for (int nb = 0; nb < HEAD_DIM / 8; ++nb) {
      *reinterpret_cast<float2*>(wacc + (warp * GROUP + r) * HEAD_DIM + nb * 8 + 2 * quad) =
          make_float2(acc[nb][0], acc[nb][1]);
    }
    if (quad == 0) {
      wml_s[warp * GROUP + r] = m_run[0];
      wml_s[(WARPS + warp) * GROUP + r] = l_run[0];
    }
  }
  __syncthreads();
  // ---- push: output o of this CTA's partial goes to CTA o % splits (its owner), slot o / splits
  // of this CTA's row there; each head's max and sum go to every owner. No barrier follows: an
  // owner waits for its bytes alone (recv_bar), and nothing reads this CTA's shared memory
  // from outside, so it may exit as soon as its own slice is stored (no cluster barrier around
  // a combine that reads the peers' memory).
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");  // peers' barriers armed
  const uint32_t recv_o_addr = smem_addr(recv_o), recv_ml_addr = smem_addr(recv_ml);
  const uint32_t bar_addr = smem_addr(recv_bar);
  for (int o = tid; o < OUTS; o += THREADS) {
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
    const int owner = o % splits;
    push_f32(cluster_addr(recv_o_addr + (rank * slots + o / splits) * 4, owner), sum_o,
             cluster_addr(bar_addr, owner));
    // Head h's max and sum go to CTA p from the thread of output h * HEAD_DIM + p (p < splits
    // <= HEAD_DIM; every thread holds its head's max and sum), not all from one thread.
    static_assert(MAX_SPLITS <= HEAD_DIM, "one pushing thread per peer and head");
    const int ml_peer = o % HEAD_DIM;
    if (ml_peer < splits) {
      const uint32_t ml = cluster_addr(recv_ml_addr + (rank * 2 * GROUP + h) * 4, ml_peer);
      const uint32_t bar = cluster_addr(bar_addr, ml_peer);
      push_f32(ml, mx, bar);
      push_f32(ml + GROUP * 4, sum_l, bar);
    }
  }

  // ---- this CTA's outputs, from every CTA's partial (its own included)
  asm volatile(
      "{\n.reg .pred done;\nWAIT_%=:\n"
      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], 0;\n"
      "@!done bra WAIT_%=;\n}\n" ::"r"(bar_addr) : "memory");
  T* out_row = static_cast<T*>(a.out) + b * a.out_stride_b + (hk * GROUP) * a.out_stride_h;
  for (int o = rank + splits * tid; o < OUTS; o += splits * THREADS) {
    const int h = o / HEAD_DIM;
    const int slot = o / splits;
    float mx = -INFINITY, num = 0.f, den = 0.f;
#pragma unroll 4
    for (int peer = 0; peer < splits; ++peer) {
      const float pm = recv_ml[peer * 2 * GROUP + h];
      const float m_new = fmaxf(mx, pm);
      const float base = m_new == -INFINITY ? 0.f : m_new;
      const float sa = ex2(mx - base), sb = ex2(pm - base);
      num = num * sa + recv_o[peer * slots + slot] * sb;
      den = den * sa + recv_ml[peer * 2 * GROUP + GROUP + h] * sb;
      mx = m_new;
    }
    out_row[h * a.out_stride_h + (o % HEAD_DIM)] =
        Elem<T>::from(den > 0.f ? num / den * v_scale : 0.f);
  }
}

// What a call of the C interface asks for: a launch, the occupancy in clusters, or the compiled
// kernel's attributes (what the sidecar records as the kernel's resources).
enum class Query { kLaunch, kMaxClusters, kAttributes };

// Number of ints kvb_kernel_attributes writes: registers per thread, local memory bytes per
// thread (spills and local arrays), static shared bytes, dynamic shared bytes, threads per
// block, SASS architecture (major * 10 + minor).
constexpr int kAttributeCount = 6;

template <typename T, bool FP8, int GROUP>
cudaError_t run(const DecodeArgs& a, cudaStream_t stream, Query query, int* out) {
  auto kernel = cluster_decode_kernel<T, FP8, GROUP>;
  constexpr int smem = smem_bytes<GROUP, Stage<FP8>>();
  // Once per instantiation: the ring needs more than the default 48 KB of dynamic shared
  // memory, and clusters of 16 (one per kv head at batch 1 on 132 SMs) are non-portable.
  static const cudaError_t configured = [] {
    auto k = cluster_decode_kernel<T, FP8, GROUP>;
    cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    return cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  }();
  if (configured != cudaSuccess) return configured;
  if (query == Query::kAttributes) {
    cudaFuncAttributes attr = {};
    const cudaError_t e = cudaFuncGetAttributes(&attr, kernel);
    if (e != cudaSuccess) return e;
    const int values[kAttributeCount] = {attr.numRegs, static_cast<int>(attr.localSizeBytes),
                                         static_cast<int>(attr.sharedSizeBytes), smem, THREADS,
                                         attr.binaryVersion};
    for (int i = 0; i < kAttributeCount; ++i) out[i] = values[i];
    return cudaSuccess;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(a.splits, a.kv_heads, a.batch);
  cfg.blockDim = dim3(THREADS, 1, 1);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = a.splits;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  if (query == Query::kMaxClusters) return cudaOccupancyMaxActiveClusters(out, kernel, &cfg);
  return cudaLaunchKernelEx(&cfg, kernel, a);
}

template <typename T, bool FP8>
cudaError_t run_group(const DecodeArgs& a, cudaStream_t stream, Query query, int* out) {
  switch (a.q_heads / a.kv_heads) {
    case 1: return run<T, FP8, 1>(a, stream, query, out);
    case 2: return run<T, FP8, 2>(a, stream, query, out);
    case 4: return run<T, FP8, 4>(a, stream, query, out);
    case 8: return run<T, FP8, 8>(a, stream, query, out);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t dispatch(const DecodeArgs* a, int dtype, void* stream, Query query, int* out) {
  if (a == nullptr || a->kv_heads < 1 || a->q_heads % a->kv_heads != 0 || a->splits < 1 ||
      a->splits > MAX_SPLITS || (a->q_heads / a->kv_heads) > MAX_GROUP) {
    return cudaErrorInvalidValue;
  }
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (dtype == 0) return run_group<__half, false>(*a, s, query, out);
  if (dtype == 1) return run_group<__nv_bfloat16, false>(*a, s, query, out);
  if (dtype == 2) return run_group<__half, true>(*a, s, query, out);
  return cudaErrorInvalidValue;
}

}  // namespace

// ---- the C interface loaded by ctypes (dtype: 0 fp16, 1 bf16, 2 fp8 e4m3 KV with fp16 q;
// returns a cudaError_t)

extern "C" int kvb_cluster_decode(const DecodeArgs* a, int dtype, void* stream) {
  return static_cast<int>(dispatch(a, dtype, stream, Query::kLaunch, nullptr));
}

// How many clusters of a->splits CTAs fit on the device at once (a->batch and grid unused).
extern "C" int kvb_max_active_clusters(const DecodeArgs* a, int dtype, int* out) {
  return static_cast<int>(dispatch(a, dtype, nullptr, Query::kMaxClusters, out));
}

// The compiled kernel a launch with these args and dtype runs, described by the CUDA runtime
// (cudaFuncGetAttributes): kAttributeCount ints, in the order kAttributeCount's comment gives.
extern "C" int kvb_kernel_attributes(const DecodeArgs* a, int dtype, int* out) {
  if (out == nullptr) return static_cast<int>(cudaErrorInvalidValue);
  return static_cast<int>(dispatch(a, dtype, nullptr, Query::kAttributes, out));
}

extern "C" const char* kvb_error_string(int code) {
  return cudaGetErrorString(static_cast<cudaError_t>(code));
}

extern "C" int kvb_args_size() { return static_cast<int>(sizeof(DecodeArgs)); }

// The compile-time constants the Python launcher mirrors (paged_decode_cluster.py checks them
// when it loads the library); -1 for a name it does not know.
extern "C" int kvb_constant(const char* name) {
  if (std::strcmp(name, "HEAD_DIM") == 0) return HEAD_DIM;
  if (std::strcmp(name, "TILE_N") == 0) return TILE_N;
  if (std::strcmp(name, "MAX_SPLITS") == 0) return MAX_SPLITS;
  if (std::strcmp(name, "MAX_GROUP") == 0) return MAX_GROUP;
  if (std::strcmp(name, "ATTRIBUTE_COUNT") == 0) return kAttributeCount;
  return -1;
}
