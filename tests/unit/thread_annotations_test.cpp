// dlaunch/thread_annotations.h: the annotated mutex and its scoped lock are a
// std::mutex underneath (the annotations themselves are checked by building
// with clang's -Wthread-safety).
#include "dlaunch/thread_annotations.h"

#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace {

class Counter {
 public:
  void add() EXCLUDES(mu_) {
    dlaunch::MutexLock lock(mu_);
    ++n_;
  }
  int get() EXCLUDES(mu_) {
    dlaunch::MutexLock lock(mu_);
    return n_;
  }
  bool try_add() EXCLUDES(mu_) {
    if (!mu_.try_lock()) return false;
    ++n_;
    mu_.unlock();
    return true;
  }
  dlaunch::Mutex& mutex() RETURN_CAPABILITY(mu_) { return mu_; }

 private:
  dlaunch::Mutex mu_;
  int n_ GUARDED_BY(mu_) = 0;
};

}  // namespace

TEST(ThreadAnnotations, MutexLockSerialisesWriters) {
  Counter c;
  std::vector<std::thread> threads;
  threads.reserve(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&c] {
      for (int i = 0; i < 10000; ++i) c.add();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.get(), 40000);
}

TEST(ThreadAnnotations, TryLockFailsWhileHeldElsewhere) {
  Counter c;
  EXPECT_TRUE(c.try_add());
  {
    dlaunch::MutexLock held(c.mutex());
    std::thread other([&c] { EXPECT_FALSE(c.try_add()); });
    other.join();
  }
  EXPECT_EQ(c.get(), 1);
}
