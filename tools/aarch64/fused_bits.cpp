// The L3 fused CPU kernels' bits across instruction sets: attention (float32 and bfloat16, causal
// or not, grouped heads, ragged lengths), log-softmax and SwiGLU on fixed pseudo-random inputs,
// hashed (FNV-1a over the outputs' bytes). tools/aarch64/test.sh builds it twice, with
// l3_fused_avx2.cpp for the host and with l3_fused_neon.cpp for aarch64 (run under qemu), and the
// two hashes must be equal: the NEON file claims the AVX2 file's bits.
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <vector>
#include "mlxrt/kernels/cpu/l3_fused_args.h"
using namespace mlxrt::kernels::cpu;
#if defined(__aarch64__)
#define ATT l3_attention_units_neon
#define LSM l3_log_softmax_neon
#define SWI l3_swiglu_neon
#else
#define ATT l3_attention_units_avx2
#define LSM l3_log_softmax_avx2
#define SWI l3_swiglu_avx2
#endif
static uint64_t h = 1469598103934665603ull;
static void mix(const void* p, size_t n) { auto* b = (const unsigned char*)p; for (size_t i = 0; i < n; ++i) { h ^= b[i]; h *= 1099511628211ull; } }
static uint32_t s = 12345;
static float rnd() { s = s * 1664525u + 1013904223u; return ((int)(s >> 8) % 20001 - 10000) / 2500.0f; }
static uint16_t bf(float f) { uint32_t u; memcpy(&u, &f, 4); return u >> 16; }
int main() {
  for (int causal = 0; causal < 2; ++causal)
  for (int e = 0; e < 2; ++e) {
    L3AttentionArgs a; a.batch = 1; a.q_heads = 4; a.kv_heads = 2; a.q_length = 5; a.kv_length = 37; a.dims = 64; a.v_dims = 72;
    a.scale = 0.125f; a.causal = causal; a.elem = a.kv_elem = e ? QmmElem::bf16 : QmmElem::f32;
    size_t nq = 4 * 5 * 64, nk = 2 * 37 * 64, nv = 2 * 37 * 72, no = 4 * 5 * 72;
    std::vector<float> q(nq), k(nk), v(nv); for (auto* x : {&q, &k, &v}) for (auto& f : *x) f = rnd();
    std::vector<uint16_t> qb(nq), kb(nk), vb(nv); for (size_t i = 0; i < nq; ++i) qb[i] = bf(q[i]); for (size_t i = 0; i < nk; ++i) kb[i] = bf(k[i]); for (size_t i = 0; i < nv; ++i) vb[i] = bf(v[i]);
    a.q = e ? (void*)qb.data() : q.data(); a.k = e ? (void*)kb.data() : k.data(); a.v = e ? (void*)vb.data() : v.data();
    a.q_strides[1] = 5 * 64; a.q_strides[2] = 64; a.k_strides[1] = 37 * 64; a.k_strides[2] = 64; a.v_strides[1] = 37 * 72; a.v_strides[2] = 72;
    std::vector<float> out(no); a.out = out.data();
    std::vector<float> scratch(l3_attention_scratch(a));
    ATT(a, 0, l3_attention_units(a), scratch.data());
    mix(out.data(), e ? no * 2 : no * 4);
  }
  std::vector<float> x(1003), y(1003); for (auto& f : x) f = rnd() * 4; LSM(x.data(), y.data(), 1003); mix(y.data(), y.size() * 4);
  std::vector<float> g(1001), u(1001), o(1001); for (auto& f : g) f = rnd() * 3; for (auto& f : u) f = rnd();
  SWI(g.data(), u.data(), o.data(), QmmElem::f32, 0, 1001); mix(o.data(), o.size() * 4);
  printf("%016llx\n", (unsigned long long)h);
}
