/* gpu-emu: kernels. A grid runs its blocks one after another (x fastest,
 * then y, z); a block runs its threads as fibers on stacks of their own.
 * The scheduler resumes each runnable thread in turn (MT_EMU_ORDER:
 * forward, reverse, or a new random permutation every round), and a thread
 * runs until it reaches __syncthreads, a warp collective or its end:
 *
 *   - __syncthreads releases the block when every thread waits at it, all
 *     at the same line; threads at different barriers, or some exited
 *     while others wait, is an error naming the lines;
 *   - a warp collective (__shfl*_sync, __syncwarp, votes) completes when
 *     every lane of its mask has reached the same call with the same mask;
 *     a lane of the mask that has exited, waits elsewhere or does not
 *     exist is an error;
 *   - no runnable thread while some have not finished is a deadlock,
 *     reported with where each group of threads waits.
 * Results that change with MT_EMU_ORDER are a race between barriers.
 *
 * Shared memory is fresh for every block, exactly the size asked for, and
 * filled with 0xff bytes (NaN): the dynamic part ends at a guard page, and
 * each static __shared__ variable sits at the end of a slot of its own
 * that ends at one, so that a read or write past the end faults; the fault
 * is reported with the kernel, its launch line, the block and the thread
 * (under AddressSanitizer, its report gives the faulting line).
 *
 * Device memory (memory.cc) ends at a guard page too, and the slack after
 * an allocation's size and the gap before it hold a canary: a read or
 * write that reaches a guard page faults and is reported the same way,
 * with the offset in the allocation and the kernel argument pointing into
 * it; the canary of every allocation the kernel's pointer arguments point
 * into is checked (its first bytes after the end each time a thread stops,
 * so that a write one element past the end is reported with that thread
 * and where it stopped; all of it when the block ends).
 *
 * Launches are checked against the device's limits (block <= 1024 threads
 * and its dimensions, grid y and z <= 65535, dynamic shared memory above
 * 48 KiB only with cudaFuncAttributeMaxDynamicSharedMemorySize and never
 * above the device's opt-in maximum), and every pointer argument must be
 * null or lie in a device allocation. */
#include "runtime.h"

#include <dlfcn.h>
#include <signal.h>
#include <ucontext.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define MT_EMU_ASAN 1
extern "C" void __sanitizer_start_switch_fiber(void **fake_stack_save, const void *bottom,
                                               size_t size);
extern "C" void __sanitizer_finish_switch_fiber(void *fake_stack_save, const void **bottom_old,
                                                size_t *size_old);
#else
#define MT_EMU_ASAN 0
#endif

/* ------------------------------------------------------------------ */
/* context switch                                                      */

#if defined(__x86_64__)
/* mt_emu_switch(save, load): saves the callee-saved registers on the
 * current stack, stores its pointer in *save, continues on the stack at
 * load. A new fiber's stack holds zeros for the registers, then the
 * trampoline's address: it calls r12(r13) (the entry and its argument). */
extern "C" void mt_emu_switch(void **save, void *load);
extern "C" void mt_emu_trampoline(void);
asm(R"(
  .text
  .globl mt_emu_switch
  .hidden mt_emu_switch
  .type mt_emu_switch, @function
mt_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size mt_emu_switch, .-mt_emu_switch
  .globl mt_emu_trampoline
  .hidden mt_emu_trampoline
  .type mt_emu_trampoline, @function
mt_emu_trampoline:
  movq %r13, %rdi
  callq *%r12
  ud2
  .size mt_emu_trampoline, .-mt_emu_trampoline
)");

static void *fiber_init(void *stack, size_t size, void (*entry)(void *), void *arg) {
  uintptr_t top = ((uintptr_t)stack + size) & ~(uintptr_t)15;
  uintptr_t R = top - 16; /* rsp after the trampoline's ret: 16-byte aligned */
  void **s = (void **)R;
  s[-1] = (void *)mt_emu_trampoline;
  s[-2] = nullptr;        /* rbp */
  s[-3] = nullptr;        /* rbx */
  s[-4] = (void *)entry;  /* r12 */
  s[-5] = arg;            /* r13 */
  s[-6] = nullptr;        /* r14 */
  s[-7] = nullptr;        /* r15 */
  return (void *)&s[-7];
}
#else
#error "gpu-emu: the fiber switch is written for x86-64"
#endif

namespace mt_emu {

thread *cur;
uint3 cur_block_idx;
dim3 cur_block_dim, cur_grid_dim;

enum { T_READY = 0, T_BARRIER, T_WARP, T_DONE };
enum { MAX_THREADS = 1024, STATIC_SLOTS = 16 };
static const size_t STACK_BYTES = MT_EMU_ASAN ? (512u << 10) : (128u << 10);
static const size_t STATIC_MAX = 48u << 10; /* static shared memory per block */

static size_t page_size() {
  static size_t p = (size_t)sysconf(_SC_PAGESIZE);
  return p;
}
static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* a region of `bytes` (page multiple) followed (high side) or preceded
 * (low side) by an inaccessible guard page; returns the usable start */
static char *guarded(size_t bytes, bool guard_high, char **guard) {
  size_t ps = page_size();
  char *m = (char *)mmap(nullptr, bytes + ps, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) fatal("mmap of %zu bytes failed", bytes + ps);
  char *g = guard_high ? m + bytes : m;
  if (mprotect(g, ps, PROT_NONE) != 0) fatal("mprotect of a guard page failed");
  *guard = g;
  return guard_high ? m : m + ps;
}

/* ---- the running launch and block ---- */

static const launch_desc *g_launch; /* the grid being run */
static void *g_sched_sp;            /* the scheduler's stack while a fiber runs */
static int g_n;                     /* threads of the block */
static thread g_th[MAX_THREADS];
#if MT_EMU_ASAN
static void *g_fake[MAX_THREADS];   /* AddressSanitizer's fake stacks */
static const void *g_sched_bottom;  /* the scheduler's stack */
static size_t g_sched_size;
#endif
static char *g_guard[MAX_THREADS];  /* each stack's guard page */
static int g_stacks;                /* stacks made so far */
static int g_n_done, g_n_barrier;
static int g_warp_waiting[MAX_THREADS / 32]; /* lanes of each warp in a warp collective */
static uint64_t g_rng;

/* shared memory */
static char *g_dyn_base, *g_dyn_guard; /* dynamic part: ends at the guard */
static size_t g_dyn_cap;
static char *g_dyn;                    /* this block's dynamic shared memory */
static size_t g_dyn_bytes;
static char *g_slot[STATIC_SLOTS], *g_slot_guard[STATIC_SLOTS];
static struct {
  shared_site *site;
  char *p;
  size_t bytes;
} g_vars[STATIC_SLOTS];
static int g_n_vars;
static size_t g_static_bytes;

/* kernel attributes (cudaFuncSetAttribute) */
static std::map<const void *, int> g_max_dynamic;

static const char *state_name(int s) {
  return s == T_READY ? "runnable" : s == T_BARRIER ? "__syncthreads" : s == T_WARP ? "warp" : "exited";
}

static const char *warp_name(int k) {
  switch (k) {
  case WARP_SYNC: return "__syncwarp";
  case WARP_SHFL_IDX: return "__shfl_sync";
  case WARP_SHFL_UP: return "__shfl_up_sync";
  case WARP_SHFL_DOWN: return "__shfl_down_sync";
  case WARP_SHFL_XOR: return "__shfl_xor_sync";
  case WARP_BALLOT: return "__ballot_sync";
  case WARP_ALL: return "__all_sync";
  case WARP_ANY: return "__any_sync";
  }
  return "warp collective";
}

/* "kernel K (launched at f:l), block (x,y,z)" */
static std::string where_block() {
  char b[512];
  snprintf(b, sizeof b, "kernel %s (launched at %s:%d, grid (%u,%u,%u) x block (%u,%u,%u)), block (%u,%u,%u)",
           g_launch->name, g_launch->file, g_launch->line, cur_grid_dim.x, cur_grid_dim.y,
           cur_grid_dim.z, cur_block_dim.x, cur_block_dim.y, cur_block_dim.z, cur_block_idx.x,
           cur_block_idx.y, cur_block_idx.z);
  return b;
}

static std::string thread_name(const thread &t) {
  char b[96];
  snprintf(b, sizeof b, "thread %d (%u,%u,%u; warp %d lane %d)", t.lin, t.tid.x, t.tid.y, t.tid.z,
           t.lin / 32, t.lin % 32);
  return b;
}

/* Where the threads of the block are: runs of consecutive threads in the
 * same state at the same line. */
static std::string block_states() {
  std::string out;
  char b[512];
  int i = 0;
  while (i < g_n) {
    const thread &t = g_th[i];
    int j = i + 1;
    while (j < g_n && g_th[j].state == t.state && g_th[j].wline == t.wline &&
           g_th[j].wfile == t.wfile && g_th[j].wkind == t.wkind)
      j++;
    if (t.state == T_BARRIER || t.state == T_WARP)
      snprintf(b, sizeof b, "\n  threads %d-%d: wait at %s, %s:%d", i, j - 1,
               t.state == T_BARRIER ? "__syncthreads" : warp_name(t.wkind), t.wfile, t.wline);
    else
      snprintf(b, sizeof b, "\n  threads %d-%d: %s", i, j - 1, state_name(t.state));
    out += b;
    i = j;
  }
  return out;
}

/* a write into the canary around an allocation the kernel's arguments point
 * into: t's when t (just stopped) is given, else one of the block's */
static void check_canaries(const thread *t) {
  for (const canary_range &r : canaries_watched()) {
    if (t && !r.after) continue;
    const unsigned char *x = canary_broken(r, t ? CANARY_EACH_STOP : r.n);
    if (!x) continue;
    long long off = (long long)(x - (const unsigned char *)r.base);
    char at[160];
    if (!t) snprintf(at, sizeof at, "by a thread of the block (found when the block ended)");
    else if (t->state == T_DONE)
      snprintf(at, sizeof at, "%s (found before it exited)", thread_name(*t).c_str());
    else
      snprintf(at, sizeof at, "%s (found before it reached %s:%d)", thread_name(*t).c_str(),
               t->wfile, t->wline);
    fatal("a write out of bounds of device memory, at %s, in %s, %s",
          device_offset(off, r.base, r.size, g_launch).c_str(), where_block().c_str(), at);
  }
}

/* ---- fibers ---- */

static void ensure_stacks(int n) {
  for (; g_stacks < n; g_stacks++) {
    char *guard;
    char *s = guarded(STACK_BYTES, false, &guard);
    g_th[g_stacks].stack = s;
    g_th[g_stacks].stack_size = STACK_BYTES;
    g_guard[g_stacks] = guard;
  }
}

/* from a fiber back to the scheduler (exiting: the fiber never resumes) */
static void to_scheduler(thread *t, bool exiting) {
  stats.switches++;
#if MT_EMU_ASAN
  __sanitizer_start_switch_fiber(exiting ? nullptr : &g_fake[t->lin], g_sched_bottom,
                                 g_sched_size);
#else
  (void)exiting;
#endif
  mt_emu_switch(&t->sp, g_sched_sp);
#if MT_EMU_ASAN
  __sanitizer_finish_switch_fiber(g_fake[t->lin], &g_sched_bottom, &g_sched_size);
#endif
}

static void fiber_main(void *arg) {
  thread *t = (thread *)arg;
#if MT_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &g_sched_bottom, &g_sched_size);
#endif
  g_launch->body();
  t->state = T_DONE;
  t->wfile = nullptr;
  t->wline = 0;
  to_scheduler(t, true);
  fatal("a finished fiber was resumed");
}

static void resume(thread *t) {
  cur = t;
#if MT_EMU_ASAN
  void *fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, t->stack, t->stack_size);
#endif
  mt_emu_switch(&g_sched_sp, t->sp);
#if MT_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  cur = nullptr;
}

/* ---- barriers and warps ---- */

/* one file name (__FILE__ of one translation unit is one literal) */
static inline bool same_file(const char *a, const char *b) { return a == b || !strcmp(a, b); }

static void check_barrier() {
  if (!g_n_barrier || g_n_barrier + g_n_done < g_n) return;
  const thread *ref = nullptr;
  for (int i = 0; i < g_n; i++) {
    const thread &t = g_th[i];
    if (t.state != T_BARRIER) continue;
    if (!ref) ref = &t;
    else if (t.wline != ref->wline || !same_file(t.wfile, ref->wfile))
      fatal_at(ref->wfile, ref->wline,
               "threads of one block wait at different barriers (%s:%d and %s:%d) in %s:%s",
               ref->wfile, ref->wline, t.wfile, t.wline, where_block().c_str(),
               block_states().c_str());
  }
  if (g_n_done)
    fatal_at(ref->wfile, ref->wline,
             "__syncthreads reached by %d of the block's %d threads; the other %d have exited, "
             "in %s:%s",
             g_n_barrier, g_n, g_n_done, where_block().c_str(), block_states().c_str());
  for (int i = 0; i < g_n; i++) g_th[i].state = T_READY;
  g_n_barrier = 0;
  stats.barriers++;
}

/* the source lane of a shuffle for lane l (-1: own value) */
static int shuffle_source(const thread &t, int l) {
  int w = t.width, seg = l / w * w;
  switch (t.wkind) {
  case WARP_SHFL_IDX: return seg + ((t.param % w) + w) % w;
  case WARP_SHFL_UP: return l - t.param >= seg ? l - t.param : -1;
  case WARP_SHFL_DOWN: return l + t.param < seg + w ? l + t.param : -1;
  case WARP_SHFL_XOR: {
    int s = l ^ t.param;
    return s >= seg && s < seg + w ? s : -1;
  }
  }
  return -1;
}

static void check_warp(int w) {
  thread *lanes = g_th + w * 32;
  int nl = g_n - w * 32 < 32 ? g_n - w * 32 : 32;
  const thread *ref = nullptr;
  for (int l = 0; l < nl; l++)
    if (lanes[l].state == T_WARP) {
      ref = &lanes[l];
      break;
    }
  if (!ref) return;
  for (int l = 0; l < nl; l++) {
    const thread &t = lanes[l];
    if (t.state != T_WARP) continue;
    if (t.wkind != ref->wkind || t.wline != ref->wline || t.mask != ref->mask ||
        !same_file(t.wfile, ref->wfile))
      fatal_at(ref->wfile, ref->wline,
               "lanes of warp %d are in different warp collectives: %s (mask %08x) here and %s "
               "(mask %08x) at %s:%d, in %s:%s",
               w, warp_name(ref->wkind), ref->mask, warp_name(t.wkind), t.mask, t.wfile, t.wline,
               where_block().c_str(), block_states().c_str());
  }
  unsigned mask = ref->mask;
  for (int l = 0; l < 32; l++) {
    if (!(mask >> l & 1u)) continue;
    if (l >= nl)
      fatal_at(ref->wfile, ref->wline,
               "%s with mask %08x names lane %d of warp %d, which the block's %d threads do not "
               "have, in %s",
               warp_name(ref->wkind), mask, l, w, g_n, where_block().c_str());
    const thread &t = lanes[l];
    if (t.state == T_READY) return; /* on its way */
    if (t.state == T_DONE)
      fatal_at(ref->wfile, ref->wline,
               "%s with mask %08x: lane %d of warp %d has exited before reaching it (a lane "
               "missing from a full-mask collective), in %s:%s",
               warp_name(ref->wkind), mask, l, w, where_block().c_str(), block_states().c_str());
    if (t.state == T_BARRIER)
      fatal_at(ref->wfile, ref->wline,
               "%s with mask %08x: lane %d of warp %d waits at __syncthreads (%s:%d) instead: a "
               "deadlock, in %s:%s",
               warp_name(ref->wkind), mask, l, w, t.wfile, t.wline, where_block().c_str(),
               block_states().c_str());
  }
  /* every lane of the mask is here: the results */
  uint64_t vote = 0;
  for (int l = 0; l < 32; l++)
    if (mask >> l & 1u) vote |= (uint64_t)(lanes[l].val != 0) << l;
  for (int l = 0; l < 32; l++) {
    if (!(mask >> l & 1u)) continue;
    thread &t = lanes[l];
    switch (t.wkind) {
    case WARP_SYNC: t.out = 0; break;
    case WARP_BALLOT: t.out = vote; break;
    case WARP_ALL: t.out = vote == (uint64_t)mask; break;
    case WARP_ANY: t.out = vote != 0; break;
    default: {
      int s = shuffle_source(t, l);
      if (s >= 0 && !(mask >> s & 1u))
        fatal_at(t.wfile, t.wline,
                 "%s: lane %d reads lane %d, which is not in the mask %08x (undefined), in %s",
                 warp_name(t.wkind), l, s, mask, where_block().c_str());
      t.out = s >= 0 ? lanes[s].val : t.val;
    }
    }
  }
  for (int l = 0; l < 32; l++)
    if (mask >> l & 1u) lanes[l].state = T_READY;
  g_warp_waiting[w] = 0;
  stats.warp_ops++;
}

/* after thread t stopped (waiting or exited). A warp is examined when
 * its last expected lane arrives, or when one of its lanes stops elsewhere
 * while others wait (all that can make or break the collective). */
static void on_stop(thread *t) {
  const int w = t->lin / 32;
  if (t->state == T_WARP) {
    if (++g_warp_waiting[w] == __builtin_popcount(t->mask)) check_warp(w);
    return;
  }
  if (t->state == T_DONE) g_n_done++;
  else if (t->state == T_BARRIER) g_n_barrier++;
  if (g_warp_waiting[w]) check_warp(w);
  check_barrier();
}

void syncthreads(const char *file, int line) {
  thread *t = cur;
  if (!t) fatal_at(file, line, "__syncthreads outside a kernel");
  t->state = T_BARRIER;
  t->wfile = file;
  t->wline = line;
  t->wkind = 0;
  to_scheduler(t, false);
}

uint64_t warp_op(warp_kind kind, const char *file, int line, unsigned mask, uint64_t val,
                 int param, int width) {
  thread *t = cur;
  if (!t) fatal_at(file, line, "%s outside a kernel", warp_name(kind));
  int lane = t->lin % 32;
  if (!(mask >> lane & 1u))
    fatal_at(file, line, "%s with mask %08x called by lane %d, which the mask leaves out, in %s",
             warp_name(kind), mask, lane, where_block().c_str());
  if (width < 1 || width > 32 || (width & (width - 1)))
    fatal_at(file, line, "%s with width %d (a power of two up to 32)", warp_name(kind), width);
  t->state = T_WARP;
  t->wfile = file;
  t->wline = line;
  t->wkind = kind;
  t->mask = mask;
  t->val = val;
  t->param = param;
  t->width = width;
  to_scheduler(t, false);
  return t->out;
}

/* ---- shared memory ---- */

static void shared_init() {
  if (g_dyn_base) return;
  size_t optin = 256u << 10;
  g_dyn_cap = round_up(optin, page_size());
  g_dyn_base = guarded(g_dyn_cap, true, &g_dyn_guard);
  size_t slot = round_up(STATIC_MAX, page_size());
  for (int i = 0; i < STATIC_SLOTS; i++) g_slot[i] = guarded(slot, true, &g_slot_guard[i]);
}

void *static_shared(shared_site *site, size_t bytes, size_t align, const char *file, int line) {
  if (!cur) fatal_at(file, line, "a __shared__ variable outside a kernel");
  for (int i = 0; i < g_n_vars; i++)
    if (g_vars[i].site == site) return g_vars[i].p;
  if (g_n_vars == STATIC_SLOTS)
    fatal_at(file, line, "more than %d __shared__ variables in one block", STATIC_SLOTS);
  g_static_bytes += bytes;
  if (g_static_bytes > STATIC_MAX)
    fatal_at(file, line, "%zu bytes of static shared memory in one block (at most %zu), in %s",
             g_static_bytes, STATIC_MAX, where_block().c_str());
  if (g_static_bytes + g_dyn_bytes > props().sharedMemPerBlockOptin)
    fatal_at(file, line,
             "%zu bytes of static and %zu of dynamic shared memory exceed the device's %zu per "
             "block, in %s",
             g_static_bytes, g_dyn_bytes, (size_t)props().sharedMemPerBlockOptin,
             where_block().c_str());
  /* at the end of its slot (the guard page right after it), aligned */
  size_t a = align < 16 ? 16 : align;
  char *p = (char *)((uintptr_t)(g_slot_guard[g_n_vars] - bytes) & ~(uintptr_t)(a - 1));
  memset(p, 0xff, bytes);
  g_vars[g_n_vars].site = site;
  g_vars[g_n_vars].p = p;
  g_vars[g_n_vars].bytes = bytes;
  g_n_vars++;
  return p;
}

void *dynamic_shared() { return g_dyn; }

static void block_shared_reset() {
  g_n_vars = 0;
  g_static_bytes = 0;
  g_dyn_bytes = g_launch->shared_bytes;
  /* the dynamic part ends 16-byte aligned at most 12 bytes before the guard */
  g_dyn = g_dyn_guard - round_up(g_dyn_bytes, 16);
  memset(g_dyn, 0xff, round_up(g_dyn_bytes, 16));
}

/* ---- faults in shared memory or a fiber's stack ---- */

#if !MT_EMU_ASAN /* AddressSanitizer reports faults itself, with the stack */
/* "file:line" of a code address, from the line tables (the emulated build
 * compiles device code with -g1) by addr2line; "" when unknown */
static void source_line(void *pc, char *out, size_t len) {
  out[0] = '\0';
  Dl_info info;
  if (!dladdr(pc, &info) || !info.dli_fname) return;
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "addr2line -e '%s' %#lx 2>/dev/null", info.dli_fname,
           (unsigned long)((uintptr_t)pc - (uintptr_t)info.dli_fbase));
  FILE *f = popen(cmd, "r");
  if (!f) return;
  if (fgets(out, (int)len, f)) out[strcspn(out, "\n")] = '\0';
  pclose(f);
  if (!strncmp(out, "??", 2)) out[0] = '\0';
  if (char *disc = strstr(out, " (discriminator")) *disc = '\0';
  /* a row of the line table may name the rewritten file (DWARF 5's file 0)
   * with the .cu file's line: the .cu file's name, from the #line that
   * opens the rewrite */
  char *colon = strchr(out, ':');
  if (!colon || colon - out < 6 || strncmp(colon - 6, ".cu.cc", 6)) return;
  std::string cc(out, colon - out), rest(colon);
  FILE *src = fopen(cc.c_str(), "r");
  char first[1024];
  if (!src) return;
  if (fgets(first, sizeof first, src) && !strncmp(first, "#line 1 \"", 9)) {
    std::string cu(first + 9);
    cu = cu.substr(0, cu.find('"'));
    snprintf(out, len, "%s%s", cu.c_str(), rest.c_str());
  }
  fclose(src);
}

static void on_segv(int sig, siginfo_t *si, void *uc) {
  char *a = (char *)si->si_addr;
  size_t ps = page_size();
  const char *what = nullptr;
  char detail[512] = "";
  if (g_launch && a >= g_dyn_guard && a < g_dyn_guard + ps) {
    what = "a read or write past the end of the block's dynamic shared memory";
    snprintf(detail, sizeof detail, " (%zu bytes asked for; byte %zu past the end)", g_dyn_bytes,
             (size_t)(a - (g_dyn + g_dyn_bytes)));
  }
  for (int i = 0; g_launch && !what && i < g_n_vars; i++)
    if (a >= g_slot_guard[i] && a < g_slot_guard[i] + ps) {
      what = "a read or write past the end of a static __shared__ variable";
      snprintf(detail, sizeof detail, " (%zu bytes)", g_vars[i].bytes);
    }
  for (int i = 0; g_launch && !what && i < g_stacks; i++)
    if (a >= g_guard[i] && a < g_guard[i] + ps) what = "a fiber's stack overflowed";
  std::string dev;
  const void *base;
  size_t size;
  long long off;
  if (!what && device_guard_fault(a, &base, &size, &off)) {
    dev = " at " + device_offset(off, base, size, g_launch);
    what = "a read or write out of bounds of device memory";
    snprintf(detail, sizeof detail, "%s", dev.c_str());
    if (!cur) {
      char line[512];
      source_line((void *)((ucontext_t *)uc)->uc_mcontext.gregs[REG_RIP], line, sizeof line);
      fatal("%s%s%s%s, outside any kernel (the host's code or an emulated library given a "
            "device pointer)", line, line[0] ? ": " : "", what, detail);
    }
  }
  if (what && cur) {
    char line[512];
    source_line((void *)((ucontext_t *)uc)->uc_mcontext.gregs[REG_RIP], line, sizeof line);
    fatal("%s%s%s%s in %s, %s", line, line[0] ? ": " : "", what, detail, where_block().c_str(),
          thread_name(*cur).c_str());
  }
  signal(sig, SIG_DFL); /* not ours: the default action when the access repeats */
}

#endif

void install_segv() {
#if !MT_EMU_ASAN
  static bool done;
  if (done) return;
  done = true;
  static char alt[1 << 16];
  stack_t ss;
  memset(&ss, 0, sizeof ss);
  ss.ss_sp = alt;
  ss.ss_size = sizeof alt;
  sigaltstack(&ss, nullptr);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigaction(SIGSEGV, &sa, nullptr);
  sigaction(SIGBUS, &sa, nullptr);
#endif
}

/* ---- running a grid ---- */

static uint64_t next_rand() {
  g_rng ^= g_rng >> 12, g_rng ^= g_rng << 25, g_rng ^= g_rng >> 27;
  return g_rng * 0x2545F4914F6CDD1DULL;
}

static void run_block() {
  g_n = (int)(cur_block_dim.x * cur_block_dim.y * cur_block_dim.z);
  ensure_stacks(g_n);
  block_shared_reset();
  for (int i = 0; i < g_n; i++) {
    thread &t = g_th[i];
    t.lin = i;
    t.tid.x = (unsigned)i % cur_block_dim.x;
    t.tid.y = (unsigned)i / cur_block_dim.x % cur_block_dim.y;
    t.tid.z = (unsigned)i / (cur_block_dim.x * cur_block_dim.y);
    t.state = T_READY;
    t.wfile = nullptr;
    t.wline = 0;
    t.wkind = 0;
    t.sp = fiber_init(t.stack, t.stack_size, fiber_main, &t);
  }
  g_n_done = g_n_barrier = 0;
  memset(g_warp_waiting, 0, sizeof g_warp_waiting);
  static int order[MAX_THREADS];
  const order_kind ok = cfg().order;
  for (int i = 0; i < g_n; i++) order[i] = ok == ORDER_REVERSE ? g_n - 1 - i : i;
  while (g_n_done < g_n) {
    if (ok == ORDER_RANDOM)
      for (int i = g_n - 1; i > 0; i--) {
        int j = (int)(next_rand() % (uint64_t)(i + 1));
        int x = order[i];
        order[i] = order[j];
        order[j] = x;
      }
    bool ran = false;
    for (int k = 0; k < g_n; k++) {
      thread *t = &g_th[order[k]];
      if (t->state != T_READY) continue;
      stats.switches++;
      resume(t);
      if (canaries_changed()) check_canaries(t);
      on_stop(t);
      ran = true;
    }
    if (!ran && g_n_done < g_n) {
      for (int w = 0; w * 32 < g_n; w++)
        if (g_warp_waiting[w]) check_warp(w); /* a broken collective names itself */
      const thread *w = nullptr;
      for (int i = 0; i < g_n && !w; i++)
        if (g_th[i].state == T_BARRIER || g_th[i].state == T_WARP) w = &g_th[i];
      fatal_at(w ? w->wfile : g_launch->file, w ? w->wline : g_launch->line,
               "deadlock: no thread of the block can go on, in %s:%s", where_block().c_str(),
               block_states().c_str());
    }
  }
  if (!canaries_watched().empty()) check_canaries(nullptr);
  stats.threads += g_n;
  stats.blocks++;
}

static void run_grid(const launch_desc &d) {
  g_launch = &d;
  shared_init();
  install_segv();
  cur_grid_dim = d.grid;
  cur_block_dim = d.block;
  g_rng = cfg().seed * 0x9E3779B97F4A7C15ULL + 1;
  watch_canaries(d);
  for (unsigned z = 0; z < d.grid.z; z++)
    for (unsigned y = 0; y < d.grid.y; y++)
      for (unsigned x = 0; x < d.grid.x; x++) {
        cur_block_idx = make_uint3(x, y, z);
        run_block();
      }
  g_launch = nullptr;
  unwatch_canaries();
}

void check_kernel_pointer(launch_desc &d, int index, const void *p) {
  if (!p) return;
  int k = find_alloc(p, nullptr, nullptr);
  if (k == ALLOC_DEVICE) {
    if (d.n_ptr_args < launch_desc::MAX_PTR_ARGS) {
      d.ptr_args[d.n_ptr_args] = p;
      d.ptr_arg_no[d.n_ptr_args++] = index + 1;
    }
    return;
  }
  fatal_at(d.file, d.line, "kernel %s: pointer argument %d (%p) lies outside every device allocation%s",
           d.name, index + 1, p, k == ALLOC_HOST ? " (it is page-locked host memory)" : "");
}

void launch(launch_desc &&d) {
  const cudaDeviceProp &pr = props();
  const dim3 b = d.block, g = d.grid;
  size_t threads = (size_t)b.x * b.y * b.z;
  if (!b.x || !b.y || !b.z || !g.x || !g.y || !g.z)
    fatal_at(d.file, d.line, "kernel %s: a launch with an empty grid (%u,%u,%u) or block (%u,%u,%u)",
             d.name, g.x, g.y, g.z, b.x, b.y, b.z);
  if (threads > (size_t)pr.maxThreadsPerBlock || (int)b.x > pr.maxThreadsDim[0] ||
      (int)b.y > pr.maxThreadsDim[1] || (int)b.z > pr.maxThreadsDim[2])
    fatal_at(d.file, d.line,
             "kernel %s: a block of (%u,%u,%u) = %zu threads exceeds the device's limits (%d "
             "threads; %d x %d x %d)",
             d.name, b.x, b.y, b.z, threads, pr.maxThreadsPerBlock, pr.maxThreadsDim[0],
             pr.maxThreadsDim[1], pr.maxThreadsDim[2]);
  if (g.x > (unsigned)pr.maxGridSize[0] || g.y > (unsigned)pr.maxGridSize[1] ||
      g.z > (unsigned)pr.maxGridSize[2])
    fatal_at(d.file, d.line, "kernel %s: a grid of (%u,%u,%u) blocks exceeds the device's (%d, %d, %d)",
             d.name, g.x, g.y, g.z, pr.maxGridSize[0], pr.maxGridSize[1], pr.maxGridSize[2]);
  if (d.shared_bytes > pr.sharedMemPerBlockOptin)
    fatal_at(d.file, d.line,
             "kernel %s: %zu bytes of dynamic shared memory exceed the device's %zu per block "
             "(sm_%d)",
             d.name, d.shared_bytes, (size_t)pr.sharedMemPerBlockOptin, pr.major * 10 + pr.minor);
  if (d.shared_bytes > pr.sharedMemPerBlock) {
    auto it = g_max_dynamic.find(d.kernel);
    int allowed = it == g_max_dynamic.end() ? -1 : it->second;
    if (allowed < (long long)d.shared_bytes)
      fatal_at(d.file, d.line,
               "kernel %s: %zu bytes of dynamic shared memory, above the default %zu, without "
               "cudaFuncAttributeMaxDynamicSharedMemorySize >= it (%s)",
               d.name, d.shared_bytes, (size_t)pr.sharedMemPerBlock,
               allowed < 0 ? "never set" : "set lower");
  }
  stats.launches++;
  auto held = std::make_shared<launch_desc>(std::move(d));
  op o{};
  o.kind = op::WORK;
  o.what = held->name;
  o.run = [held]() { run_grid(*held); };
  enqueue(held->stream, std::move(o));
}

} // namespace mt_emu

using namespace mt_emu;

extern "C" cudaError_t cudaFuncSetAttribute(const void *func, cudaFuncAttribute attr, int value) {
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || (size_t)value > props().sharedMemPerBlockOptin)
      return set_error(cudaErrorInvalidValue);
    g_max_dynamic[func] = value;
  }
  return cudaSuccess;
}
