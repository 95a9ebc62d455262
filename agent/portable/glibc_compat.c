// The portable agent's bridge to older C libraries (docs/portable-agent.md).
//
// dlaunch copies its agent to nodes that have nothing installed; they may
// run any glibc from 2.17 on (the manylinux2014 baseline). A program linked
// here, against glibc 2.36, asks the loader for the newest version of each
// function (pthread_create@GLIBC_2.34, stat@GLIBC_2.33, ...) and such a
// program does not start on an older glibc. The agent is linked with
// -Wl,--wrap=NAME for each such NAME (agent/CMakeLists.txt), so every call,
// also those from the static libstdc++ and libgcc, lands in __wrap_NAME
// below, which either
//   - forwards to the oldest version of NAME (a `.symver` reference, a tail
//     jump: the arguments are untouched), which every glibc since 2.2.5
//     still exports; or
//   - does the work itself where NAME is newer than 2.17 (stat: the old
//     __xstat; memfd_create, close_range, getrandom: the system call;
//     _dl_find_object: dl_iterate_phdr), or asks the loader whether this
//     glibc has it (sigabbrev_np, __cxa_thread_atexit_impl,
//     pthread_cond_clockwait).
// tests: `objdump -T dlaunch-agent` has no version above GLIBC_2.17
// (PortableAgent.* in tests/integration), and the agent runs on an older
// Debian's root (the bare-node bed).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

// __wrap_NAME: jump to NAME@VERSION.
#define DLAUNCH_FORWARD(name, version)                        \
  __asm__(".symver dlaunch_old_" #name ", " #name "@" version \
          "\n"                                                \
          ".text\n"                                           \
          ".globl __wrap_" #name                              \
          "\n"                                                \
          ".type __wrap_" #name                               \
          ", @function\n"                                     \
          "__wrap_" #name                                     \
          ":\n"                                               \
          "  jmp dlaunch_old_" #name                          \
          "@PLT\n"                                            \
          ".size __wrap_" #name ", .-__wrap_" #name "\n");

// libpthread.so.0 and libdl.so.2 of older glibc (the agent lists both as
// needed) and libc.so.6 of newer ones export these under the same versions.
DLAUNCH_FORWARD(pthread_create, "GLIBC_2.2.5")
DLAUNCH_FORWARD(pthread_detach, "GLIBC_2.2.5")
DLAUNCH_FORWARD(pthread_join, "GLIBC_2.2.5")
DLAUNCH_FORWARD(pthread_once, "GLIBC_2.2.5")
DLAUNCH_FORWARD(pthread_key_create, "GLIBC_2.2.5")
DLAUNCH_FORWARD(__pthread_key_create, "GLIBC_2.2.5")
DLAUNCH_FORWARD(pthread_key_delete, "GLIBC_2.2.5")
DLAUNCH_FORWARD(pthread_getspecific, "GLIBC_2.2.5")
DLAUNCH_FORWARD(pthread_setspecific, "GLIBC_2.2.5")
DLAUNCH_FORWARD(pthread_sigmask, "GLIBC_2.2.5")
DLAUNCH_FORWARD(pthread_kill, "GLIBC_2.2.5")
DLAUNCH_FORWARD(pthread_condattr_setclock, "GLIBC_2.3.3")
DLAUNCH_FORWARD(pthread_getaffinity_np, "GLIBC_2.3.4")
DLAUNCH_FORWARD(pthread_setaffinity_np, "GLIBC_2.3.4")
DLAUNCH_FORWARD(pthread_rwlock_init, "GLIBC_2.2.5")
DLAUNCH_FORWARD(pthread_rwlock_destroy, "GLIBC_2.2.5")
DLAUNCH_FORWARD(pthread_rwlock_rdlock, "GLIBC_2.2.5")
DLAUNCH_FORWARD(pthread_rwlock_wrlock, "GLIBC_2.2.5")
DLAUNCH_FORWARD(pthread_rwlock_unlock, "GLIBC_2.2.5")
DLAUNCH_FORWARD(dlopen, "GLIBC_2.2.5")
DLAUNCH_FORWARD(dlsym, "GLIBC_2.2.5")
DLAUNCH_FORWARD(dlclose, "GLIBC_2.2.5")
DLAUNCH_FORWARD(dlerror, "GLIBC_2.2.5")
DLAUNCH_FORWARD(dladdr, "GLIBC_2.2.5")

// --- the start: __libc_start_main ---------------------------------------
// Since glibc 2.34 the start code passes no `init` and libc runs the
// program's constructors itself; 2.33 and older run only what `init` runs.
// So the old entry point is given an `init` that runs them (preinit array,
// _init, init array), which both old and new glibc call ("legacy" start).
typedef void (*dlaunch_init_fn)(int, char**, char**);
extern dlaunch_init_fn __preinit_array_start[] __attribute__((visibility("hidden")));
extern dlaunch_init_fn __preinit_array_end[] __attribute__((visibility("hidden")));
extern dlaunch_init_fn __init_array_start[] __attribute__((visibility("hidden")));
extern dlaunch_init_fn __init_array_end[] __attribute__((visibility("hidden")));
extern void _init(void);

static void dlaunch_run_constructors(int argc, char** argv, char** envp) {
  for (dlaunch_init_fn* f = __preinit_array_start; f < __preinit_array_end; ++f)
    (*f)(argc, argv, envp);
  _init();
  for (dlaunch_init_fn* f = __init_array_start; f < __init_array_end; ++f) (*f)(argc, argv, envp);
}

typedef int (*dlaunch_main_fn)(int, char**, char**);
int dlaunch_old_libc_start_main(dlaunch_main_fn main_fn, int argc, char** argv,
                                dlaunch_init_fn init, void (*fini)(void), void (*rtld_fini)(void),
                                void* stack_end);
__asm__(".symver dlaunch_old_libc_start_main, __libc_start_main@GLIBC_2.2.5");

int __wrap___libc_start_main(dlaunch_main_fn main_fn, int argc, char** argv, dlaunch_init_fn init,
                             void (*fini)(void), void (*rtld_fini)(void), void* stack_end) {
  (void)init;  // NULL from today's start code
  (void)fini;  // the loader runs the fini array (rtld_fini)
  return dlaunch_old_libc_start_main(main_fn, argc, argv, dlaunch_run_constructors, NULL, rtld_fini,
                                     stack_end);
}

// --- stat and friends: functions only since 2.33 ---------------------------
enum { kStatVer = 1 };  // x86-64's _STAT_VER
int dlaunch_old_xstat(int ver, const char* path, struct stat* buf);
int dlaunch_old_lxstat(int ver, const char* path, struct stat* buf);
int dlaunch_old_fxstat(int ver, int fd, struct stat* buf);
int dlaunch_old_fxstatat(int ver, int dirfd, const char* path, struct stat* buf, int flags);
__asm__(".symver dlaunch_old_xstat, __xstat@GLIBC_2.2.5");
__asm__(".symver dlaunch_old_lxstat, __lxstat@GLIBC_2.2.5");
__asm__(".symver dlaunch_old_fxstat, __fxstat@GLIBC_2.2.5");
__asm__(".symver dlaunch_old_fxstatat, __fxstatat@GLIBC_2.4");

int __wrap_stat(const char* path, struct stat* buf) {
  return dlaunch_old_xstat(kStatVer, path, buf);
}
int __wrap_stat64(const char* path, struct stat* buf) {
  return dlaunch_old_xstat(kStatVer, path, buf);
}
int __wrap_lstat(const char* path, struct stat* buf) {
  return dlaunch_old_lxstat(kStatVer, path, buf);
}
int __wrap_lstat64(const char* path, struct stat* buf) {
  return dlaunch_old_lxstat(kStatVer, path, buf);
}
int __wrap_fstat(int fd, struct stat* buf) { return dlaunch_old_fxstat(kStatVer, fd, buf); }
int __wrap_fstat64(int fd, struct stat* buf) { return dlaunch_old_fxstat(kStatVer, fd, buf); }
int __wrap_fstatat(int dirfd, const char* path, struct stat* buf, int flags) {
  return dlaunch_old_fxstatat(kStatVer, dirfd, path, buf, flags);
}
int __wrap_fstatat64(int dirfd, const char* path, struct stat* buf, int flags) {
  return dlaunch_old_fxstatat(kStatVer, dirfd, path, buf, flags);
}

// --- system calls that glibc wrapped late -----------------------------------
int __wrap_memfd_create(const char* name, unsigned flags) {
  return (int)syscall(SYS_memfd_create, name, flags);  // ENOSYS before Linux 3.17
}

// Called between fork and exec: async-signal-safe only. Before Linux 5.9
// there is no close_range(2): close each descriptor up to the soft limit.
int __wrap_close_range(unsigned first, unsigned last, int flags) {
  const long r = syscall(SYS_close_range, first, last, flags);
  if (r == 0 || errno != ENOSYS || flags != 0) return (int)r;
  struct rlimit lim;
  if (syscall(SYS_getrlimit, RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY &&
      lim.rlim_cur > 0 && last >= lim.rlim_cur) {
    last = (unsigned)(lim.rlim_cur - 1);
  }
  for (unsigned fd = first; fd <= last && fd >= first; ++fd) (void)syscall(SYS_close, fd);
  return 0;
}

static int dlaunch_random(void* out, size_t n) {
  unsigned char* p = out;
  size_t got = 0;
  while (got < n) {
    const long r = syscall(SYS_getrandom, p + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  if (got == n) return 0;
  const int fd = (int)syscall(SYS_open, "/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  while (got < n) {
    const ssize_t r = read(fd, p + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  (void)close(fd);
  return got == n ? 0 : -1;
}

ssize_t __wrap_getrandom(void* buf, size_t n, unsigned flags) {
  return (ssize_t)syscall(SYS_getrandom, buf, n, flags);
}

int __wrap_getentropy(void* buf, size_t n) {
  if (n > 256) {
    errno = EIO;
    return -1;
  }
  return dlaunch_random(buf, n);
}

// libstdc++'s std::random_device; it has no way to report a failure here.
uint32_t __wrap_arc4random(void) {
  uint32_t v = 0;
  (void)dlaunch_random(&v, sizeof v);
  return v;
}

// --- asked of the loader: present in newer glibc only -----------------------
// dlsym's answer as a function pointer (ISO C has no cast between the two).
static void* dlaunch_lookup(const char* name) { return dlsym(RTLD_DEFAULT, name); }
#define DLAUNCH_AS_FN(fn, ptr) memcpy(&(fn), &(ptr), sizeof(fn))

// The abbreviation of a signal ("SEGV"); glibc 2.32's, else our own table.
const char* __wrap_sigabbrev_np(int sig) {
  typedef const char* (*abbrev_fn)(int);
  static abbrev_fn real;
  static int looked;
  if (!__atomic_load_n(&looked, __ATOMIC_ACQUIRE)) {
    void* p = dlaunch_lookup("sigabbrev_np");
    abbrev_fn found = NULL;
    DLAUNCH_AS_FN(found, p);
    __atomic_store_n(&real, found, __ATOMIC_RELEASE);
    __atomic_store_n(&looked, 1, __ATOMIC_RELEASE);
  }
  abbrev_fn f = __atomic_load_n(&real, __ATOMIC_ACQUIRE);
  if (f != NULL) return f(sig);
  static const char* const kNames[] = {
      NULL,   "HUP",  "INT",  "QUIT", "ILL",    "TRAP",   "ABRT",  "BUS",  "FPE",  "KILL", "USR1",
      "SEGV", "USR2", "PIPE", "ALRM", "TERM",   "STKFLT", "CHLD",  "CONT", "STOP", "TSTP", "TTIN",
      "TTOU", "URG",  "XCPU", "XFSZ", "VTALRM", "PROF",   "WINCH", "IO",   "PWR",  "SYS"};
  if (sig <= 0 || sig >= (int)(sizeof kNames / sizeof kNames[0])) return NULL;
  return kNames[sig];
}

// std::condition_variable's waits on steady_clock (glibc 2.30's
// pthread_cond_clockwait): where glibc lacks it, the monotonic deadline
// becomes the same distance on CLOCK_REALTIME, which the default condition
// variable waits on (a wall clock step during the wait shifts it; libstdc++
// built for older glibc does the same).
int __wrap_pthread_cond_clockwait(pthread_cond_t* cond, pthread_mutex_t* mutex, clockid_t clock,
                                  const struct timespec* abstime) {
  typedef int (*clockwait_fn)(pthread_cond_t*, pthread_mutex_t*, clockid_t, const struct timespec*);
  static clockwait_fn real;
  static int looked;
  if (!__atomic_load_n(&looked, __ATOMIC_ACQUIRE)) {
    void* p = dlaunch_lookup("pthread_cond_clockwait");
    clockwait_fn found = NULL;
    DLAUNCH_AS_FN(found, p);
    __atomic_store_n(&real, found, __ATOMIC_RELEASE);
    __atomic_store_n(&looked, 1, __ATOMIC_RELEASE);
  }
  clockwait_fn f = __atomic_load_n(&real, __ATOMIC_ACQUIRE);
  if (f != NULL) return f(cond, mutex, clock, abstime);
  if (clock == CLOCK_REALTIME) return pthread_cond_timedwait(cond, mutex, abstime);
  struct timespec now;
  struct timespec wall;
  clock_gettime(clock, &now);
  clock_gettime(CLOCK_REALTIME, &wall);
  long long ns = (long long)(abstime->tv_sec - now.tv_sec) * 1000000000LL +
                 (abstime->tv_nsec - now.tv_nsec) + wall.tv_nsec;
  if (ns < 0) ns = 0;
  struct timespec until;
  until.tv_sec = wall.tv_sec + (time_t)(ns / 1000000000LL);
  until.tv_nsec = (long)(ns % 1000000000LL);
  return pthread_cond_timedwait(cond, mutex, &until);
}

// thread_local destructors: glibc 2.18's; before it, they are not run (the
// agent's threads end with the process).
int __wrap___cxa_thread_atexit_impl(void (*dtor)(void*), void* obj, void* dso) {
  typedef int (*impl_fn)(void (*)(void*), void*, void*);
  void* p = dlaunch_lookup("__cxa_thread_atexit_impl");
  impl_fn f = NULL;
  DLAUNCH_AS_FN(f, p);
  return f != NULL ? f(dtor, obj, dso) : 0;
}

// libstdc++ skips atomic reference counts while this says one thread:
// always say "maybe several" (older glibc have no such variable).
char __wrap___libc_single_threaded = 0;

#ifdef DLFO_STRUCT_HAS_EH_DBASE
// The unwinder (static libgcc) asks glibc 2.35's _dl_find_object for the
// object holding a return address and its PT_GNU_EH_FRAME; the same answer
// from dl_iterate_phdr, which every glibc has.
struct dlaunch_find {
  uintptr_t pc;
  struct dl_find_object* out;
  int found;
};

static int dlaunch_find_object_cb(struct dl_phdr_info* info, size_t size, void* data) {
  (void)size;
  struct dlaunch_find* q = data;
  uintptr_t lo = UINTPTR_MAX;
  uintptr_t hi = 0;
  int inside = 0;
  void* eh_frame = NULL;
  for (size_t i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)* p = &info->dlpi_phdr[i];
    const uintptr_t start = info->dlpi_addr + p->p_vaddr;
    if (p->p_type == PT_LOAD) {
      const uintptr_t end = start + p->p_memsz;
      if (start < lo) lo = start;
      if (end > hi) hi = end;
      if (q->pc >= start && q->pc < end) inside = 1;
    } else if (p->p_type == PT_GNU_EH_FRAME) {
      eh_frame = (void*)start;
    }
  }
  if (!inside) return 0;
  memset(q->out, 0, sizeof *q->out);
  q->out->dlfo_map_start = (void*)lo;
  q->out->dlfo_map_end = (void*)hi;
  q->out->dlfo_eh_frame = eh_frame;
  q->found = 1;
  return 1;
}

int __wrap__dl_find_object(void* pc, struct dl_find_object* result) {
  struct dlaunch_find q = {(uintptr_t)pc, result, 0};
  dl_iterate_phdr(dlaunch_find_object_cb, &q);
  return q.found ? 0 : -1;
}
#endif
