/* A sampling profiler of the host's time, for LD_PRELOAD into a process that runs MLX (mlxrt or
 * Python with mlx-lm), on a machine where perf is not at hand: every millisecond of CPU time the
 * process uses (ITIMER_PROF), the thread that used it records its call stack. At exit the
 * stacks go to $SAMPLER_OUT with /proc/self/maps, for bench/gpu/sampler_report.py to name.
 * Used to see where a host-bound decode step's dispatch goes (MLX's eval loop, the primitives'
 * eval_gpu, the allocator, CUDA's driver).
 *
 * Build: cc -O2 -shared -fPIC -o sampler.so sampler.c -ldl
 * Run:   SAMPLER_OUT=stacks.txt LD_PRELOAD=./sampler.so program ...   [SAMPLER_US=1000] */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

enum { kDepth = 40, kMaxSamples = 120000 };

struct Sample {
  int tid;
  int depth;
  void* frames[kDepth];
};

static struct Sample* samples;
static int next_sample;
static int dropped;

static void on_prof(int sig) {
  (void)sig;
  int i = __atomic_fetch_add(&next_sample, 1, __ATOMIC_RELAXED);
  if (i >= kMaxSamples) {
    __atomic_fetch_add(&dropped, 1, __ATOMIC_RELAXED);
    return;
  }
  samples[i].tid = (int)syscall(SYS_gettid);
  samples[i].depth = backtrace(samples[i].frames, kDepth);
}

__attribute__((constructor)) static void start(void) {
  if (!getenv("SAMPLER_OUT")) return;
  samples = calloc(kMaxSamples, sizeof *samples);
  if (!samples) return;
  void* warm[4];
  backtrace(warm, 4);  // loads the unwinder now, not inside the first signal
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_prof;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGPROF, &sa, NULL);
  const char* us = getenv("SAMPLER_US");
  long period = us ? atol(us) : 1000;
  struct itimerval t = {{0, period}, {0, period}};
  setitimer(ITIMER_PROF, &t, NULL);
}

static void disarm(void) {
  struct itimerval off;
  memset(&off, 0, sizeof off);
  setitimer(ITIMER_PROF, &off, NULL);
}

/* The timer outlives exec (a wrapper script exec'ing the program) while the handler does not:
 * a SIGPROF before the new image's constructor would kill it. So exec runs disarmed. */
int execve(const char* path, char* const argv[], char* const envp[]) {
  static int (*real)(const char*, char* const[], char* const[]);
  if (!real) real = (int (*)(const char*, char* const[], char* const[]))dlsym(RTLD_NEXT, "execve");
  disarm();
  int rc = real(path, argv, envp);
  if (samples) {  // exec failed: sample on
    const char* us = getenv("SAMPLER_US");
    long period = us ? atol(us) : 1000;
    struct itimerval t = {{0, period}, {0, period}};
    setitimer(ITIMER_PROF, &t, NULL);
  }
  return rc;
}

__attribute__((destructor)) static void stop(void) {
  if (!samples) return;
  disarm();
  char path[4096];
  snprintf(path, sizeof path, "%s.%d", getenv("SAMPLER_OUT"), (int)getpid());
  FILE* out = fopen(path, "w");
  if (!out) return;
  fprintf(out, "pid %d main %d dropped %d\n", (int)getpid(), (int)getpid(), dropped);
  FILE* maps = fopen("/proc/self/maps", "r");
  char line[4096];
  while (maps && fgets(line, sizeof line, maps)) fprintf(out, "map %s", line);
  if (maps) fclose(maps);
  int n = next_sample < kMaxSamples ? next_sample : kMaxSamples;
  for (int i = 0; i < n; ++i) {
    fprintf(out, "s %d", samples[i].tid);
    for (int k = 0; k < samples[i].depth; ++k) fprintf(out, " %lx", (unsigned long)samples[i].frames[k]);
    fputc('\n', out);
  }
  fclose(out);
}
