/* Counts and times the calls through which MLX's CUDA backend prepares work for a new shape, for
 * LD_PRELOAD into a process that runs MLX (bench/gpu/shape_cost.py reads it through ctypes):
 * NVRTC compiles (MLX's JIT kernels), CUDA module loads (a JIT kernel's cubin, from the compile
 * or MLX's on-disk cache), cuDNN backend finalizes (an SDPA graph's heuristics and execution
 * plans) and executes/graph population, and cuBLASLt's algorithm heuristic. libmlx.so calls each
 * through its dynamic symbol table, so a definition here comes first.
 *
 * Also the calls MLX makes for each kernel of a step, to count a step's kernels and what adding
 * them costs the host: kernel nodes added to a CUDA graph (or kernels launched, with
 * MLX_USE_CUDA_GRAPHS=0), graphs created (one a command buffer, and one a cuBLAS capture), cuBLASLt
 * matmuls. MLX's wheel links CUDA's runtime statically, so its graph instantiation, update and
 * launch are out of reach here; the driver calls it makes by name are not.
 *
 * Build: cc -O2 -shared -fPIC -o api_timer.so api_timer.c -ldl
 * Read:  api_timer_report(buf, size) writes "name count ms" lines; api_timer_reset() zeroes them. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum {
  NVRTC_COMPILE, MODULE_LOAD, CUDNN_FINALIZE, CUDNN_EXECUTE, CUDNN_POPULATE, CUDNN_UPDATE, CUBLASLT_HEURISTIC,
  CUBLASLT_MATMUL, GRAPH_ADD_KERNEL, LAUNCH_KERNEL, GRAPH_CREATE, N_API
};
static const char* kNames[N_API] = {"nvrtcCompileProgram", "cuModuleLoadDataEx", "cudnnBackendFinalize",
                                    "cudnnBackendExecute", "cudnnBackendPopulateCudaGraph",
                                    "cudnnBackendUpdateCudaGraph", "cublasLtMatmulAlgoGetHeuristic",
                                    "cublasLtMatmul", "cuGraphAddKernelNode", "cuLaunchKernelEx", "cuGraphCreate"};
static long counts[N_API];
static double ms[N_API];

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* The library's own definition. Python opens MLX's extension (and so libmlx's dependencies)
 * RTLD_LOCAL, out of RTLD_NEXT's reach: then the library is asked by name. */
static void* next(const char* name, const char* library) {
  void* f = dlsym(RTLD_NEXT, name);
  if (!f) {
    void* lib = dlopen(library, RTLD_LAZY | RTLD_NOLOAD);
    if (!lib) lib = dlopen(library, RTLD_LAZY);
    if (lib) f = dlsym(lib, name);
  }
  if (!f) {
    fprintf(stderr, "api_timer: %s not found in %s\n", name, library);
    abort();
  }
  return f;
}

/* With API_TIMER_TRACE set, each call that builds something for a new shape (an NVRTC compile, a
 * module load, a cuDNN graph populated: one per new SDPA graph) also goes to stderr as it returns,
 * with the wall-clock time in the server log's format and the cuDNN finalizes since the last such
 * line: lined up with a DEBUG log's step lines, it says which step paid for what. */
static void trace(int id, double took_ms) {
  static int on = -1;
  static long finalizes_seen;
  static double finalize_ms_seen;
  if (on < 0) on = getenv("API_TIMER_TRACE") != NULL;
  if (!on || (id != NVRTC_COMPILE && id != MODULE_LOAD && id != CUDNN_POPULATE)) return;
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  struct tm local;
  localtime_r(&t.tv_sec, &local);
  char when[32];
  strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &local);
  fprintf(stderr, "api_timer trace %s,%03ld %s %.3f ms; cudnnBackendFinalize since the last line: %ld, %.3f ms\n", when,
          t.tv_nsec / 1000000, kNames[id], took_ms, counts[CUDNN_FINALIZE] - finalizes_seen,
          ms[CUDNN_FINALIZE] - finalize_ms_seen);
  finalizes_seen = counts[CUDNN_FINALIZE];
  finalize_ms_seen = ms[CUDNN_FINALIZE];
}

#define TIMED(id, call)              \
  double t0 = now_ms();              \
  int rc = call;                     \
  __atomic_add_fetch(&counts[id], 1, __ATOMIC_RELAXED); \
  double took = now_ms() - t0;       \
  ms[id] += took;                    \
  trace(id, took);                   \
  return rc;

typedef void* P;

int nvrtcCompileProgram(P prog, int n, const char* const* opts) {
  static int (*f)(P, int, const char* const*);
  if (!f) f = next("nvrtcCompileProgram", "libnvrtc.so.13");
  TIMED(NVRTC_COMPILE, f(prog, n, opts))
}

int cuModuleLoadDataEx(P module, const void* image, unsigned n, P options, P values) {
  static int (*f)(P, const void*, unsigned, P, P);
  if (!f) f = next("cuModuleLoadDataEx", "libcuda.so.1");
  TIMED(MODULE_LOAD, f(module, image, n, options, values))
}

int cudnnBackendFinalize(P desc) {
  static int (*f)(P);
  if (!f) f = next("cudnnBackendFinalize", "libcudnn.so.9");
  TIMED(CUDNN_FINALIZE, f(desc))
}

int cudnnBackendExecute(P handle, P plan, P pack) {
  static int (*f)(P, P, P);
  if (!f) f = next("cudnnBackendExecute", "libcudnn.so.9");
  TIMED(CUDNN_EXECUTE, f(handle, plan, pack))
}

int cudnnBackendPopulateCudaGraph(P handle, P plan, P pack, P graph) {
  static int (*f)(P, P, P, P);
  if (!f) f = next("cudnnBackendPopulateCudaGraph", "libcudnn.so.9");
  TIMED(CUDNN_POPULATE, f(handle, plan, pack, graph))
}

int cudnnBackendUpdateCudaGraph(P handle, P plan, P pack, P graph) {
  static int (*f)(P, P, P, P);
  if (!f) f = next("cudnnBackendUpdateCudaGraph", "libcudnn.so.9");
  TIMED(CUDNN_UPDATE, f(handle, plan, pack, graph))
}

int cublasLtMatmulAlgoGetHeuristic(P h, P op, P a, P b, P c, P d, P pref, int requested, P results, int* returned) {
  static int (*f)(P, P, P, P, P, P, P, int, P, int*);
  if (!f) f = next("cublasLtMatmulAlgoGetHeuristic", "libcublasLt.so.13");
  TIMED(CUBLASLT_HEURISTIC, f(h, op, a, b, c, d, pref, requested, results, returned))
}

int cublasLtMatmul(P h, P desc, const void* alpha, const void* a, P ad, const void* b, P bd, const void* beta,
                   const void* c, P cd, void* d, P dd, const void* algo, void* ws, size_t ws_size, P stream) {
  static int (*f)(P, P, const void*, const void*, P, const void*, P, const void*, const void*, P, void*, P,
                  const void*, void*, size_t, P);
  if (!f) f = next("cublasLtMatmul", "libcublasLt.so.13");
  TIMED(CUBLASLT_MATMUL, f(h, desc, alpha, a, ad, b, bd, beta, c, cd, d, dd, algo, ws, ws_size, stream))
}

/* cuda.h maps cuGraphAddKernelNode to its _v2. */
int cuGraphAddKernelNode_v2(P node, P graph, const P* deps, size_t n_deps, const void* params) {
  static int (*f)(P, P, const P*, size_t, const void*);
  if (!f) f = next("cuGraphAddKernelNode_v2", "libcuda.so.1");
  TIMED(GRAPH_ADD_KERNEL, f(node, graph, deps, n_deps, params))
}

int cuLaunchKernelEx(const void* config, P function, P* params, P* extra) {
  static int (*f)(const void*, P, P*, P*);
  if (!f) f = next("cuLaunchKernelEx", "libcuda.so.1");
  TIMED(LAUNCH_KERNEL, f(config, function, params, extra))
}

int cuGraphCreate(P graph, unsigned flags) {
  static int (*f)(P, unsigned);
  if (!f) f = next("cuGraphCreate", "libcuda.so.1");
  TIMED(GRAPH_CREATE, f(graph, flags))
}

int api_timer_report(char* buf, int size) {
  int used = 0;
  for (int i = 0; i < N_API && used < size; ++i)
    used += snprintf(buf + used, size - used, "%s %ld %.3f\n", kNames[i], counts[i], ms[i]);
  return used;
}

void api_timer_reset(void) {
  memset(counts, 0, sizeof counts);
  memset(ms, 0, sizeof ms);
}

/* With API_TIMER_AT_EXIT set, the counts go to stderr when the process ends (for a program that
 * cannot call api_timer_report, such as mlxrt itself). */
__attribute__((destructor)) static void report_at_exit(void) {
  if (!getenv("API_TIMER_AT_EXIT")) return;
  for (int i = 0; i < N_API; ++i) fprintf(stderr, "api_timer %s %ld %.3f\n", kNames[i], counts[i], ms[i]);
}
