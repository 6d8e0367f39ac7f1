#pragma once
// What the L3 fused kernels' instruction-set files (l3_fused_avx2.cpp, l3_fused_neon.cpp) share
// beyond their vector code: the SwiGLU loop with its tail, the attention's work units, and the
// dtype dispatch of both. Included only by those files, inside their anonymous namespace, after
// they define load8 / store8 / swiglu8 (eight lanes) and query_row (one query's attention), and
// after their includes of <cstring> and l3_fused_args.h (no include here: it would land inside
// that namespace).

template <QmmElem E>
void swiglu(const void* gate, const void* up, void* out, long long begin, long long end) {
  long long i = begin;
  for (; i + 8 <= end; i += 8) store8<E>(out, i, swiglu8(load8<E>(gate, i), load8<E>(up, i)));
  if (i < end) {
    // The tail through a zero-padded copy of eight.
    alignas(32) unsigned char g[32] = {}, u[32] = {}, o[32];
    const size_t item = E == QmmElem::f32 ? 4 : 2;
    const size_t bytes = static_cast<size_t>(end - i) * item;
    std::memcpy(g, static_cast<const unsigned char*>(gate) + static_cast<size_t>(i) * item, bytes);
    std::memcpy(u, static_cast<const unsigned char*>(up) + static_cast<size_t>(i) * item, bytes);
    store8<E>(o, 0, swiglu8(load8<E>(g, 0), load8<E>(u, 0)));
    std::memcpy(static_cast<unsigned char*>(out) + static_cast<size_t>(i) * item, o, bytes);
  }
}

void swiglu_units(const void* gate, const void* up, void* out, QmmElem elem, long long begin, long long end) {
  if (elem == QmmElem::f32)
    swiglu<QmmElem::f32>(gate, up, out, begin, end);
  else if (elem == QmmElem::bf16)
    swiglu<QmmElem::bf16>(gate, up, out, begin, end);
  else
    swiglu<QmmElem::f16>(gate, up, out, begin, end);
}

template <QmmElem E, QmmElem K = E>
void run(const L3AttentionArgs& a, int begin, int end, float* scratch) {
  const int blocks = (a.q_length + kL3AttentionRowsPerUnit - 1) / kL3AttentionRowsPerUnit;
  for (int u = begin; u < end; ++u) {
    const int block = u % blocks;
    const int h = (u / blocks) % a.q_heads;
    const int b = u / blocks / a.q_heads;
    const int i1 = (block + 1) * kL3AttentionRowsPerUnit < a.q_length ? (block + 1) * kL3AttentionRowsPerUnit : a.q_length;
    for (int i = block * kL3AttentionRowsPerUnit; i < i1; ++i) query_row<E, K>(a, b, h, i, scratch);
  }
}

void attention_units(const L3AttentionArgs& a, int begin, int end, float* scratch) {
  if (a.elem == QmmElem::f32 && a.kv_elem == QmmElem::f16)
    run<QmmElem::f32, QmmElem::f16>(a, begin, end, scratch);
  else if (a.elem == QmmElem::f32)
    run<QmmElem::f32>(a, begin, end, scratch);
  else if (a.elem == QmmElem::bf16)
    run<QmmElem::bf16>(a, begin, end, scratch);
  else
    run<QmmElem::f16>(a, begin, end, scratch);
}
