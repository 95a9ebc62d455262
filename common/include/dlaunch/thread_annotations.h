// Clang's thread-safety analysis (-Wthread-safety): attributes that say which
// mutex guards which data and which functions take, release or need it, and
// an annotated mutex, dlaunch::Mutex, with its scoped lock, dlaunch::MutexLock.
// libstdc++'s std::mutex carries no annotations, so code that wants the
// analysis locks a dlaunch::Mutex instead (same cost: it is a std::mutex).
//
//   class Counter {
//    public:
//     void add() EXCLUDES(mu_) {
//       dlaunch::MutexLock lock(mu_);
//       ++n_;
//     }
//    private:
//     void add_locked() REQUIRES(mu_) { ++n_; }
//     dlaunch::Mutex mu_;
//     int n_ GUARDED_BY(mu_) = 0;
//   };
//
// On compilers without the attributes (GCC) every macro is empty. A macro of
// the same name defined before this header (another library's) is kept.
// Reference: https://clang.llvm.org/docs/ThreadSafetyAnalysis.html
#pragma once

#include <mutex>

#if defined(__clang__) && defined(__has_attribute)
#if __has_attribute(guarded_by)
#define DLAUNCH_THREAD_ANNOTATION(x) __attribute__((x))
#endif
#endif
#ifndef DLAUNCH_THREAD_ANNOTATION
#define DLAUNCH_THREAD_ANNOTATION(x)
#endif

// A type that is a capability (a mutex): CAPABILITY("mutex").
#ifndef CAPABILITY
#define CAPABILITY(name) DLAUNCH_THREAD_ANNOTATION(capability(name))
#endif
// A RAII type that holds a capability for its lifetime.
#ifndef SCOPED_CAPABILITY
#define SCOPED_CAPABILITY DLAUNCH_THREAD_ANNOTATION(scoped_lockable)
#endif
// Data that may be touched only with the capability held.
#ifndef GUARDED_BY
#define GUARDED_BY(x) DLAUNCH_THREAD_ANNOTATION(guarded_by(x))
#endif
// A pointer whose pointee may be touched only with the capability held.
#ifndef PT_GUARDED_BY
#define PT_GUARDED_BY(x) DLAUNCH_THREAD_ANNOTATION(pt_guarded_by(x))
#endif
// A function the caller must call with the capabilities held (and still holds after).
#ifndef REQUIRES
#define REQUIRES(...) DLAUNCH_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#endif
// A function the caller must not call with the capabilities held (it takes them).
#ifndef EXCLUDES
#define EXCLUDES(...) DLAUNCH_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#endif
// A function that takes the capabilities (or, on a capability type, the object itself).
#ifndef ACQUIRE
#define ACQUIRE(...) DLAUNCH_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#endif
// A function that gives the capabilities (or the object itself) back.
#ifndef RELEASE
#define RELEASE(...) DLAUNCH_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#endif
// A function that takes the capability when it returns `ret`.
#ifndef TRY_ACQUIRE
#define TRY_ACQUIRE(...) DLAUNCH_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#endif
// A function that returns a reference to the capability (an accessor).
#ifndef RETURN_CAPABILITY
#define RETURN_CAPABILITY(x) DLAUNCH_THREAD_ANNOTATION(lock_returned(x))
#endif
// A function the analysis skips: say why where it is used.
#ifndef NO_THREAD_SAFETY_ANALYSIS
#define NO_THREAD_SAFETY_ANALYSIS DLAUNCH_THREAD_ANNOTATION(no_thread_safety_analysis)
#endif

namespace dlaunch {

// std::mutex, annotated as a capability.
class CAPABILITY("mutex") Mutex {
 public:
  constexpr Mutex() noexcept = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }
  bool try_lock() TRY_ACQUIRE(true) { return mu_.try_lock(); }

  // The std::mutex underneath, for std::condition_variable and the like; the
  // analysis does not follow what is done with it.
  std::mutex& native() { return mu_; }

 private:
  std::mutex mu_;
};

// Holds a Mutex from construction to destruction (std::lock_guard, annotated).
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() RELEASE() { mu_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

}  // namespace dlaunch
