/* The CUDA emulator's runtime: runs one launch of a generated CUDA kernel on the CPU.
 *
 * - Every GPU thread is a fiber with its own stack; a block's fibers run on
 *   one OS thread, switched at __syncthreads and at warp functions, in an order
 *   shuffled per pass (seeded), so code that relies on an order the GPU does not
 *   promise can show it. A block whose threads can no longer all proceed (some at
 *   __syncthreads, some in a warp function or exited) is reported as a deadlock.
 * - Blocks run on a few OS threads in a shuffled order; a cooperative launch runs every
 *   block on an OS thread of its own at once, so the kernel's own grid barrier (an
 *   atomic counter and a spin) runs as written.
 * - The launch runs in a child process (fork) on copies of the buffers in shared
 *   memory, each followed by an inaccessible page and framed by canary bytes: an access
 *   past a buffer, a write before or after it, a write into a `const` parameter, a
 *   crash, undefined behaviour (the kernel library is built with UBSan) or a hang
 *   becomes an error message naming the parameter, the block and the thread, and the
 *   calling process stays as it was. Only a clean run's buffers are copied back.
 * - Every global-memory access is counted (the kernel library is compiled with GCC's
 *   ThreadSanitizer instrumentation, whose hooks -- __tsan_read4 and the rest -- are
 *   defined here instead of by TSan's runtime): per parameter, the bytes read and
 *   written by access width, and the distinct bytes read and written; and how they
 *   coalesce: the lanes of a warp whose k-th execution of one access site it is make
 *   one request, and the request costs the 32-byte sectors its lanes touch, as a GPU's
 *   memory pipeline counts them (Nsight Compute's sectors per request). */
#include "wb_cuda_emu.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <unordered_map>
#include <cstdarg>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr std::size_t STACK_BYTES = 128 * 1024;   /* one GPU thread's stack (virtual) */
constexpr unsigned char CANARY = 0xA5;
constexpr std::size_t GUARD_BYTES = 64 * 1024;     /* inaccessible, after each buffer */
constexpr int MAX_GROUPS = 8;                     /* distinct warp masks in flight */

enum State : int { RUNNABLE, AT_BARRIER, AT_WARP, DONE };

/* -- switching stacks: a few instructions on x86-64 (ucontext's swapcontext makes a
   system call for the signal mask at every switch, ~20x slower); ucontext elsewhere */
#if defined(__x86_64__)
struct Context { void* sp; };
extern "C" void wb_emu_switch(void** from_sp, void* to_sp);
/* callee-saved registers, MXCSR and the x87 control word on the old stack; then the
   new stack's, in reverse */
asm(R"(
  .text
  .globl wb_emu_switch
  .hidden wb_emu_switch
  .type wb_emu_switch,@function
wb_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size wb_emu_switch, .-wb_emu_switch
)");
void ctx_init(Context* c, char* stack, std::size_t size, void (*fn)()) {
  void** sp = (void**)(((std::uintptr_t)(stack + size)) & ~(std::uintptr_t)15);
  *--sp = nullptr;                 /* fn's return address: it never returns */
  *--sp = (void*)fn;               /* where wb_emu_switch's ret goes */
  for (int i = 0; i < 6; ++i) *--sp = nullptr;
  --sp;
  unsigned int mxcsr;
  unsigned short cw;
  __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
  __asm__ volatile("fnstcw %0" : "=m"(cw));
  std::memcpy(sp, &mxcsr, 4);
  std::memcpy((char*)sp + 4, &cw, 2);
  c->sp = sp;
}
inline void ctx_switch(Context* from, Context* to) { wb_emu_switch(&from->sp, to->sp); }
#else
struct Context { ucontext_t uc; };
void ctx_init(Context* c, char* stack, std::size_t size, void (*fn)()) {
  getcontext(&c->uc);
  c->uc.uc_stack.ss_sp = stack;
  c->uc.uc_stack.ss_size = size;
  c->uc.uc_link = nullptr;
  makecontext(&c->uc, fn, 0);
}
inline void ctx_switch(Context* from, Context* to) { swapcontext(&from->uc, &to->uc); }
#endif

struct WarpGroup {                 /* the lanes of one warp meeting in one mask */
  unsigned int mask = 0, arrived = 0, gen = 0;
  int op = 0;
  unsigned long long slot[2][32];
};

struct Fiber {
  Context ctx;
  std::unordered_map<const void*, unsigned int> sites;   /* executions of each access site */
  wb_emu_ids ids;
  State state;
  unsigned int lane, warp;
  int group, parity, op;           /* the warp exchange it waits in */
};

/* one parameter's accesses: bytes by access width (1, 2, 4, 8, 16), read and written */
struct Counts {
  unsigned long long bytes[2][5];  /* read, written: by access width */
  unsigned long long requests[2], sectors[2];
};
/* per parameter: read[5], written[5], distinct read, distinct written, load requests,
   load sectors, store requests, store sectors */
constexpr int STAT_WORDS = 16;

/* one warp-wide request: the lanes' k-th execution of one access site */
struct RequestKey {
  const void* site;
  unsigned int nth;
  bool operator==(const RequestKey& o) const { return site == o.site && nth == o.nth; }
};
struct RequestKeyHash {
  std::size_t operator()(const RequestKey& k) const {
    return std::hash<const void*>()(k.site) ^ (std::size_t)k.nth * 0x9E3779B97F4A7C15ULL;
  }
};
struct Request {
  int param, write;
  unsigned int sectors;
  unsigned long long sector[64];   /* the distinct 32-byte sectors touched (a warp's 32
                                      lanes of 16 bytes touch 64 at most, misaligned) */
};

struct Runner {                    /* one OS thread running blocks */
  std::vector<Counts> counts;      /* per parameter */
  /* per warp of the block running: its requests so far */
  std::vector<std::unordered_map<RequestKey, Request, RequestKeyHash>> requests;
  Context sched;
  std::vector<Fiber> fibers;
  std::vector<int> order;
  std::vector<std::vector<WarpGroup>> warps;
  char* stacks = nullptr;
  std::size_t stack_span = 0;
  Fiber* cur = nullptr;
  unsigned int live = 0, at_barrier = 0;
  unsigned long long epoch = 0;      /* barrier intervals, counted over every block run */
  unsigned long long rng = 0;
  char altstack[64 * 1024];
};

/* -- the child's state (set after fork, read by fibers and the signal handler) ---- */
struct Buffer { char* start; unsigned long long size; char* guard; };
void* g_kernel;
void (*g_trampoline)(void*, void**);
void** g_args;
unsigned int g_grid, g_block;
std::vector<Buffer> g_buffers;     /* one per parameter (size 0: a scalar) */
std::vector<unsigned char*> g_touched;   /* per parameter, per byte: 1 read, 2 written */
unsigned long long* g_stats;       /* shared with the parent: STAT_WORDS a parameter */
const char* g_lo;                  /* where the parameters' buffers lie, all of them */
const char* g_hi;
char* g_error;                     /* shared with the parent */
std::size_t g_error_len;
bool g_in_child = false;
std::vector<Runner*> g_runners;
thread_local Runner* tls_runner;

std::size_t page_size() { return (std::size_t)sysconf(_SC_PAGESIZE); }

unsigned long long next_random(unsigned long long& s) {        /* xorshift64* */
  s ^= s >> 12; s ^= s << 25; s ^= s >> 27;
  return s * 2685821657736338717ULL;
}

/* the error text, prefixed with where it happened; then the child exits */
[[noreturn]] void child_fail(int code, const char* fmt, ...) {
  char where[96] = "";
  if (tls_runner && tls_runner->cur) {
    const wb_emu_ids& d = tls_runner->cur->ids;
    std::snprintf(where, sizeof where, "block %u, thread %u: ", d.bid.x, d.tid.x);
  }
  va_list ap;
  va_start(ap, fmt);
  int n = std::snprintf(g_error, g_error_len, "%s", where);
  if (n >= 0 && (std::size_t)n < g_error_len) std::vsnprintf(g_error + n, g_error_len - n, fmt, ap);
  va_end(ap);
  _exit(code);
}

void yield_to_scheduler(Runner* r) { ctx_switch(&r->cur->ctx, &r->sched); }

void release_barrier(Runner* r) {
  for (Fiber& f : r->fibers)
    if (f.state == AT_BARRIER) f.state = RUNNABLE;
  r->at_barrier = 0;
  r->epoch += 1;
}

void fiber_main() {
  Runner* r = tls_runner;
  g_trampoline(g_kernel, g_args);
  r->cur->state = DONE;
  r->live -= 1;
  if (r->live && r->at_barrier == r->live) release_barrier(r);
  yield_to_scheduler(r);           /* never resumed: it is done */
  std::abort();
}

std::string ranges(const std::vector<unsigned int>& ids) {
  std::string s;
  for (std::size_t i = 0; i < ids.size();) {
    std::size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    char b[32];
    std::snprintf(b, sizeof b, i == j ? "%u" : "%u-%u", ids[i], ids[j]);
    s += (s.empty() ? "" : ",") + std::string(b);
    i = j + 1;
  }
  return s;
}

[[noreturn]] void deadlock(Runner* r) {
  std::vector<unsigned int> barrier, warp, done;
  std::string groups;
  for (Fiber& f : r->fibers) {
    const unsigned int t = f.ids.tid.x;
    (f.state == AT_BARRIER ? barrier : f.state == AT_WARP ? warp : done).push_back(t);
  }
  for (std::size_t w = 0; w < r->warps.size(); ++w)
    for (WarpGroup& g : r->warps[w])
      if (g.arrived) {
        char b[128];
        std::snprintf(b, sizeof b, "; warp %zu waits for lanes 0x%08x of mask 0x%08x",
                      w, g.mask & ~g.arrived, g.mask);
        groups += b;
      }
  const wb_emu_ids& d = r->fibers[0].ids;
  r->cur = nullptr;
  child_fail(6, "block %u cannot go on (a deadlock): threads [%s] wait at __syncthreads, "
             "[%s] in a warp function, [%s] have exited%s", d.bid.x, ranges(barrier).c_str(),
             ranges(warp).c_str(), ranges(done).c_str(), groups.c_str());
}

void run_block(Runner* r, unsigned int bid) {
  const unsigned int n = g_block;
  r->epoch += 1;
  for (unsigned int t = 0; t < n; ++t) {
    Fiber& f = r->fibers[t];
    f.ids = {{t, 0, 0}, {bid, 0, 0}, {g_block, 1, 1}, {g_grid, 1, 1}, &r->epoch, r->epoch};
    f.state = RUNNABLE;
    f.lane = t & 31u;
    f.warp = t >> 5;
    ctx_init(&f.ctx, r->stacks + t * r->stack_span + page_size(),
             r->stack_span - page_size(), fiber_main);
  }
  for (auto& w : r->warps)
    for (WarpGroup& g : w) g = WarpGroup();
  for (Fiber& f : r->fibers) f.sites.clear();
  r->live = n;
  r->at_barrier = 0;
  r->rng = (bid + 1) * 0x9E3779B97F4A7C15ULL ^ r->rng;
  while (r->live) {
    for (unsigned int i = n; i > 1; --i)            /* this pass's order */
      std::swap(r->order[i - 1], r->order[next_random(r->rng) % i]);
    bool ran = false;
    for (unsigned int i = 0; i < n; ++i) {
      Fiber& f = r->fibers[r->order[i]];
      if (f.state != RUNNABLE) continue;
      r->cur = &f;
      ctx_switch(&r->sched, &f.ctx);
      ran = true;
    }
    if (!ran) deadlock(r);
  }
  r->cur = nullptr;
  for (auto& warp : r->requests) {             /* the block's requests, costed */
    for (auto& kv : warp) {
      Counts& c = r->counts[kv.second.param];
      c.requests[kv.second.write] += 1;
      c.sectors[kv.second.write] += kv.second.sectors;
    }
    warp.clear();
  }
}

Runner* new_runner(unsigned long long seed) {
  Runner* r = new Runner();
  const unsigned int n = g_block;
  r->fibers.resize(n);
  r->order.resize(n);
  for (unsigned int i = 0; i < n; ++i) r->order[i] = (int)i;
  r->warps.assign((n + 31) / 32, std::vector<WarpGroup>(MAX_GROUPS));
  r->stack_span = STACK_BYTES + page_size();
  void* p = mmap(nullptr, r->stack_span * n, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (p == MAP_FAILED) child_fail(7, "cannot map %u thread stacks", n);
  r->stacks = (char*)p;
  for (unsigned int i = 0; i < n; ++i)                 /* a guard below each stack */
    mprotect(r->stacks + i * r->stack_span, page_size(), PROT_NONE);
  r->rng = seed | 1;
  r->counts.assign(g_buffers.size(), Counts{});
  r->requests.resize((n + 31) / 32);
  return r;
}

void enter_runner(Runner* r) {
  tls_runner = r;
  stack_t ss;
  ss.ss_sp = r->altstack;
  ss.ss_size = sizeof r->altstack;
  ss.ss_flags = 0;
  sigaltstack(&ss, nullptr);
}

void on_fault(int sig, siginfo_t* info, void*) {
  char* a = (char*)info->si_addr;
  for (std::size_t i = 0; i < g_buffers.size(); ++i) {
    const Buffer& b = g_buffers[i];
    if (b.guard && a >= b.guard && a < b.guard + GUARD_BYTES)
      child_fail(5, "an access %lld bytes past the end of parameter %zu (%llu bytes)",
                 (long long)(a - (b.start + b.size)), i, b.size);
  }
  for (Runner* r : g_runners)
    if (r && a >= r->stacks && a < r->stacks + r->stack_span * g_block &&
        (std::size_t)(a - r->stacks) % r->stack_span < page_size())
      child_fail(5, "the thread's stack overflowed (%zu KB emulated)", STACK_BYTES / 1024);
  child_fail(5, "%s at address %p, next to no parameter (a wild pointer)",
             sig == SIGBUS ? "a bus error" : "a segmentation fault", (void*)a);
}

[[noreturn]] void child_main(const wb_emu_launch_args* la, int err_fd) {
  g_in_child = true;
  dup2(err_fd, 2);                                   /* UBSan's reports */
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigaction(SIGSEGV, &sa, nullptr);
  sigaction(SIGBUS, &sa, nullptr);
  const unsigned int grid = g_grid;
  const unsigned int cores = std::max(1u, std::min(8u, std::thread::hardware_concurrency()));
  const unsigned int workers = la->cooperative ? grid : std::min(grid, cores);
  std::vector<unsigned int> order(grid);
  for (unsigned int i = 0; i < grid; ++i) order[i] = i;
  unsigned long long s = la->seed * 0xD1342543DE82EF95ULL + 1;
  for (unsigned int i = grid; i > 1; --i) std::swap(order[i - 1], order[next_random(s) % i]);
  g_lo = (const char*)~(std::uintptr_t)0;
  g_hi = nullptr;
  for (const Buffer& b : g_buffers) {
    g_touched.push_back(b.size ? (unsigned char*)std::calloc(b.size, 1) : nullptr);
    if (b.size) {
      g_lo = std::min<const char*>(g_lo, b.start);
      g_hi = std::max<const char*>(g_hi, b.start + b.size);
    }
  }
  g_runners.assign(workers, nullptr);
  for (unsigned int w = 0; w < workers; ++w) g_runners[w] = new_runner(la->seed + w);
  std::atomic<unsigned int> next{0};
  std::vector<std::thread> threads;
  for (unsigned int w = 0; w < workers; ++w)
    threads.emplace_back([&, w] {
      Runner* r = g_runners[w];
      enter_runner(r);
      for (unsigned int i; (i = next.fetch_add(1)) < grid;) run_block(r, order[i]);
    });
  for (auto& t : threads) t.join();
  for (std::size_t i = 0; i < g_buffers.size(); ++i) {     /* the counts, to the parent */
    unsigned long long* out = g_stats + i * STAT_WORDS;
    for (Runner* r : g_runners)
      for (int w = 0; w < 2; ++w) {
        for (int k = 0; k < 5; ++k) out[w * 5 + k] += r->counts[i].bytes[w][k];
        out[12 + 2 * w] += r->counts[i].requests[w];
        out[13 + 2 * w] += r->counts[i].sectors[w];
      }
    for (unsigned long long j = 0; j < g_buffers[i].size; ++j) {
      out[10] += g_touched[i][j] & 1u;
      out[11] += (g_touched[i][j] >> 1) & 1u;
    }
  }
  std::fflush(stderr);
  _exit(0);
}

void say(const wb_emu_launch_args* la, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(la->error, la->error_len, fmt, ap);
  va_end(ap);
}

std::string read_all(FILE* f) {
  std::string s;
  std::fflush(f);
  std::rewind(f);
  char b[4096];
  for (std::size_t n; (n = std::fread(b, 1, sizeof b, f)) > 0;) s.append(b, n);
  return s;
}


/* -- global-memory accesses: ThreadSanitizer's instrumentation calls these ---------- */
void count_request(Runner* r, std::size_t param, unsigned long long offset,
                   unsigned long long n, int write, const void* site) {
  Fiber* f = r->cur;
  const unsigned int nth = f->sites[site]++;
  Request& q = r->requests[f->warp].try_emplace(RequestKey{site, nth}).first->second;
  if (q.sectors == 0) { q.param = (int)param; q.write = write; }
  for (unsigned long long s = offset >> 5; s <= (offset + n - 1) >> 5; ++s) {
    unsigned int j = 0;
    while (j < q.sectors && q.sector[j] != s) ++j;
    if (j == q.sectors && q.sectors < 64) q.sector[q.sectors++] = s;
  }
}

/* one access of n bytes at p by the running GPU thread (site: the instruction making
   it; null for atomics, which are not costed as requests) */
void count_access(const void* p, unsigned long long n, int write, const void* site = nullptr) {
  const char* a = (const char*)p;
  if (a < g_lo || a >= g_hi) return;       /* the stack, shared memory: not global */
  Runner* r = tls_runner;
  if (!r) return;
  for (std::size_t i = 0; i < g_buffers.size(); ++i) {
    const Buffer& b = g_buffers[i];
    if (a < b.start || a >= b.start + b.size) continue;
    const int k = n >= 16 ? 4 : n >= 8 ? 3 : n >= 4 ? 2 : n >= 2 ? 1 : 0;
    r->counts[i].bytes[write][k] += n;
    /* (sectors of the buffer's own offsets: a cudaMalloc'd buffer starts 256-aligned) */
    if (site && r->cur) count_request(r, i, (unsigned long long)(a - b.start), n, write, site);
    unsigned char* t = g_touched[i] + (a - b.start);
    const unsigned long long m = std::min<unsigned long long>(n, b.start + b.size - a);
    const unsigned char bit = (unsigned char)(1u << write);
    for (unsigned long long j = 0; j < m; ++j)                 /* (mostly set already) */
      if (!(__atomic_load_n(t + j, __ATOMIC_RELAXED) & bit))
        __atomic_fetch_or(t + j, bit, __ATOMIC_RELAXED);
    return;
  }
}

}  // namespace

extern "C" {
void __tsan_init(void) {}
void __tsan_func_entry(void*) {}
void __tsan_func_exit(void) {}
void __tsan_vptr_read(void**) {}
void __tsan_vptr_update(void**, void*) {}
#define WB_EMU_SITE __builtin_return_address(0)
void __tsan_read_range(void* p, unsigned long n) { count_access(p, n, 0, WB_EMU_SITE); }
void __tsan_write_range(void* p, unsigned long n) { count_access(p, n, 1, WB_EMU_SITE); }
#define WB_EMU_RW(n)                                                                    \
  void __tsan_read##n(void* p) { count_access(p, n, 0, WB_EMU_SITE); }                 \
  void __tsan_write##n(void* p) { count_access(p, n, 1, WB_EMU_SITE); }                \
  void __tsan_unaligned_read##n(void* p) { count_access(p, n, 0, WB_EMU_SITE); }       \
  void __tsan_unaligned_write##n(void* p) { count_access(p, n, 1, WB_EMU_SITE); }      \
  void __tsan_volatile_read##n(void* p) { count_access(p, n, 0, WB_EMU_SITE); }        \
  void __tsan_volatile_write##n(void* p) { count_access(p, n, 1, WB_EMU_SITE); }
WB_EMU_RW(1) WB_EMU_RW(2) WB_EMU_RW(4) WB_EMU_RW(8) WB_EMU_RW(16)
#undef WB_EMU_RW
/* atomics: done here (seq_cst whatever the order asked), each counted as a read and a
   write of its width */
#define WB_EMU_ATOMIC(bits, T)                                                             \
  T __tsan_atomic##bits##_load(const volatile T* a, int) {                                 \
    count_access((const void*)a, sizeof(T), 0);                                           \
    return __atomic_load_n(a, __ATOMIC_SEQ_CST); }                                        \
  void __tsan_atomic##bits##_store(volatile T* a, T v, int) {                              \
    count_access((const void*)a, sizeof(T), 1);                                           \
    __atomic_store_n(a, v, __ATOMIC_SEQ_CST); }                                           \
  T __tsan_atomic##bits##_exchange(volatile T* a, T v, int) {                              \
    count_access((const void*)a, sizeof(T), 0); count_access((const void*)a, sizeof(T), 1); \
    return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); }                                 \
  WB_EMU_RMW(bits, T, fetch_add) WB_EMU_RMW(bits, T, fetch_sub)                            \
  WB_EMU_RMW(bits, T, fetch_and) WB_EMU_RMW(bits, T, fetch_or)                             \
  WB_EMU_RMW(bits, T, fetch_xor) WB_EMU_RMW(bits, T, fetch_nand)                           \
  int __tsan_atomic##bits##_compare_exchange_strong(volatile T* a, T* c, T v, int, int) {  \
    count_access((const void*)a, sizeof(T), 0); count_access((const void*)a, sizeof(T), 1); \
    return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); } \
  int __tsan_atomic##bits##_compare_exchange_weak(volatile T* a, T* c, T v, int, int) {    \
    count_access((const void*)a, sizeof(T), 0); count_access((const void*)a, sizeof(T), 1); \
    return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); } \
  T __tsan_atomic##bits##_compare_exchange_val(volatile T* a, T c, T v, int, int) {        \
    count_access((const void*)a, sizeof(T), 0); count_access((const void*)a, sizeof(T), 1); \
    __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);     \
    return c; }
#define WB_EMU_RMW(bits, T, op)                                                            \
  T __tsan_atomic##bits##_##op(volatile T* a, T v, int) {                                  \
    count_access((const void*)a, sizeof(T), 0); count_access((const void*)a, sizeof(T), 1); \
    return __atomic_##op(a, v, __ATOMIC_SEQ_CST); }
WB_EMU_ATOMIC(8, unsigned char) WB_EMU_ATOMIC(16, unsigned short)
WB_EMU_ATOMIC(32, unsigned int) WB_EMU_ATOMIC(64, unsigned long long)
#undef WB_EMU_ATOMIC
#undef WB_EMU_RMW
void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
}

namespace {
}  // namespace

/* -- what kernels call ----------------------------------------------------------- */
extern "C" const wb_emu_ids* wb_emu_current(void) { return &tls_runner->cur->ids; }

extern "C" void wb_emu_fail(const char* what) {
  if (!g_in_child) std::abort();
  child_fail(4, "%s", what);
}

extern "C" void wb_emu_syncthreads(void) {
  Runner* r = tls_runner;
  r->cur->state = AT_BARRIER;
  r->at_barrier += 1;
  if (r->at_barrier == r->live) release_barrier(r);
  yield_to_scheduler(r);
}

extern "C" void wb_emu_warp_exchange(unsigned int mask, unsigned long long mine, int op,
                                     unsigned long long* out) {
  Runner* r = tls_runner;
  Fiber* f = r->cur;
  const unsigned int lanes = std::min(32u, g_block - f->warp * 32);
  if (!(mask >> f->lane & 1u))
    child_fail(4, "a warp function's mask 0x%08x leaves out the lane calling it (%u)",
               mask, f->lane);
  if (lanes < 32 && (mask >> lanes))
    child_fail(4, "a warp function's mask 0x%08x names lanes past the block's last "
               "thread (the warp has %u)", mask, lanes);
  std::vector<WarpGroup>& groups = r->warps[f->warp];
  int gi = -1;
  for (int i = 0; i < MAX_GROUPS && gi < 0; ++i)
    if (groups[i].mask == mask) gi = i;
  for (int i = 0; i < MAX_GROUPS && gi < 0; ++i)
    if (groups[i].arrived == 0) { groups[i].mask = mask; gi = i; }
  if (gi < 0) child_fail(4, "more than %d warp masks in flight in warp %u", MAX_GROUPS, f->warp);
  WarpGroup& g = groups[gi];
  if (g.arrived && g.op != op)
    child_fail(4, "lanes of warp %u meet in different warp functions under mask 0x%08x",
               f->warp, mask);
  g.op = op;
  f->group = gi;
  f->parity = (int)(g.gen & 1u);
  g.slot[f->parity][f->lane] = mine;
  g.arrived |= 1u << f->lane;
  if (g.arrived == mask) {                           /* the last lane: release all */
    for (unsigned int l = 0; l < lanes; ++l)
      if (mask >> l & 1u) {
        Fiber& o = r->fibers[f->warp * 32 + l];
        if (o.state == AT_WARP) o.state = RUNNABLE;
      }
    g.arrived = 0;
    g.gen += 1;
  } else {
    f->state = AT_WARP;
    yield_to_scheduler(r);
  }
  std::memcpy(out, g.slot[f->parity], sizeof g.slot[0]);
}

extern "C" void wb_emu_check_lane(unsigned int mask, unsigned int src, const char* what) {
  if (!(mask >> src & 1u))
    child_fail(4, "%s reads lane %u, which its mask 0x%08x leaves out (undefined on a GPU)",
               what, src, mask);
}

/* -- one launch ------------------------------------------------------------------- */
extern "C" int wb_emu_run(void* kernel, void (*trampoline)(void*, void**), const int* kinds,
                          int nparams, const wb_emu_launch_args* la) {
  if (la->nargs != nparams) {
    say(la, "the launch passes %d arguments; the kernel takes %d", la->nargs, nparams);
    return 2;
  }
  if (la->block == 0 || la->block > 1024 || la->grid == 0) {
    say(la, "an invalid launch: grid %u, block %u (a block holds 1 to 1024 threads)",
        la->grid, la->block);
    return 2;
  }
  const std::size_t page = page_size();
  /* the shared region: a page for the error text, then each buffer at the end of its
     own pages (16-byte aligned, as CUDA's allocations are at least), then GUARD_BYTES
     no access may touch */
  const std::size_t guard_bytes = (GUARD_BYTES + page - 1) / page * page;
  std::vector<std::size_t> offset(nparams, 0), span(nparams, 0);
  const std::size_t stat_bytes = (nparams * STAT_WORDS * 8 + page - 1) / page * page;
  std::size_t total = page + stat_bytes;
  for (int i = 0; i < nparams; ++i)
    if (kinds[i] != 0) {
      span[i] = (la->sizes[i] + 16 + page - 1) / page * page;
      offset[i] = total;
      total += span[i] + guard_bytes;
    }
  char* shm = (char*)mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                          -1, 0);
  if (shm == MAP_FAILED) {
    say(la, "cannot map %zu bytes of shared memory for the launch", total);
    return 3;
  }
  std::vector<Buffer> buffers(nparams, Buffer{nullptr, 0, nullptr});
  std::vector<void*> device(nparams, nullptr);
  std::vector<void*> args(nparams, nullptr);
  for (int i = 0; i < nparams; ++i) {
    if (kinds[i] == 0) { args[i] = *(void**)la->args[i]; continue; }
    char* base = shm + offset[i];
    char* guard = base + span[i];
    const unsigned long long size = la->sizes[i];
    char* start = (char*)((std::uintptr_t)(guard - size) & ~(std::uintptr_t)15);
    std::memset(base, CANARY, span[i]);
    std::memcpy(start, *(void**)la->args[i], size);
    mprotect(guard, guard_bytes, PROT_NONE);
    buffers[i] = {start, size, guard};
    device[i] = start;
    args[i] = &device[i];
  }
  char* error = shm;
  error[0] = 0;
  unsigned long long* stats = (unsigned long long*)(shm + page);   /* zero: a new mapping */
  FILE* err_file = std::tmpfile();
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    g_kernel = kernel;
    g_trampoline = trampoline;
    g_args = args.data();
    g_grid = la->grid;
    g_block = la->block;
    g_buffers = buffers;
    g_stats = stats;
    g_error = error;
    g_error_len = page;
    child_main(la, err_file ? fileno(err_file) : 2);
  }
  int rc = 0;
  if (pid < 0) {
    say(la, "fork failed: cannot start the emulated launch");
    rc = 3;
  } else {
    int status = 0;
    struct timespec t0, now, nap = {0, 50000};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
      const pid_t w = waitpid(pid, &status, WNOHANG);
      if (w == pid) break;
      clock_gettime(CLOCK_MONOTONIC, &now);
      const double s = (now.tv_sec - t0.tv_sec) + 1e-9 * (now.tv_nsec - t0.tv_nsec);
      if (s > la->timeout_s) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        say(la, "the kernel did not finish in %.0f s of emulation: a grid barrier some "
            "block never reaches, or a loop that does not end", la->timeout_s);
        rc = 6;
        break;
      }
      nanosleep(&nap, nullptr);
      if (nap.tv_nsec < 2000000) nap.tv_nsec *= 2;
    }
    const std::string report = err_file ? read_all(err_file) : std::string();
    if (rc == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      rc = WIFEXITED(status) ? 4 : 5;
      std::string what =
          error[0] ? std::string(error)
          : WIFSIGNALED(status)
              ? "the emulated launch died of signal " + std::to_string(WTERMSIG(status))
              : "the emulated launch exited with " + std::to_string(WEXITSTATUS(status));
      if (!report.empty()) what += "\n" + report.substr(0, 4000);
      say(la, "%s", what.c_str());
    }
    for (int i = 0; rc == 0 && i < nparams; ++i) {
      if (kinds[i] == 0) continue;
      const Buffer& b = buffers[i];
      const char* base = shm + offset[i];
      const char* end = b.start + b.size;
      const char* p = base;
      while (p < b.start && (unsigned char)*p == CANARY) ++p;
      if (p == b.start) for (p = end; p < b.guard && (unsigned char)*p == CANARY;) ++p;
      if (p != b.guard) {
        say(la, "the kernel wrote %s parameter %d (%llu bytes), at byte %lld from its start",
            p < b.start ? "before" : "past the end of", i, b.size, (long long)(p - b.start));
        rc = 5;
      }
      if (rc == 0 && kinds[i] == 2 && std::memcmp(b.start, *(void**)la->args[i], b.size)) {
        say(la, "the kernel wrote into parameter %d, which it takes as const", i);
        rc = 5;
      }
    }
    if (rc == 0) {
      for (int i = 0; i < nparams; ++i)
        if (kinds[i] == 1) std::memcpy(*(void**)la->args[i], buffers[i].start, buffers[i].size);
      if (la->accesses)
        std::memcpy(la->accesses, stats, nparams * STAT_WORDS * sizeof(unsigned long long));
    }
  }
  if (err_file) std::fclose(err_file);
  munmap(shm, total);
  return rc;
}
