#include "output/file_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <deque>
#include <map>
#include <utility>

#include <boost/asio/post.hpp>

#include "dlaunch/process.h"
#include "dlaunch/thread_annotations.h"
#include "dlaunch/unique_fd.h"

namespace dlaunch {

namespace {
constexpr std::size_t kFileCoalesce = 64 * 1024;  // small pieces join the last queued one
}  // namespace

struct FileWriter::State {
  struct File {
    int fd = -1;      // where the bytes go; -1 until created
    UniqueFd owned;   // a file this writer created
    int dir_fd = -1;  // add_file: the folder (one of dirs)
    std::string name;
    std::string label;
    mode_t mode = 0;
    bool failed = false;
  };
  struct Chunk {
    Target target = 0;
    std::string data;
    bool rotate = false;    // no data: rename the file here (rotate(), publish())
    std::string rename_to;  // publish(): this name; rotate(): empty (NAME.1)
  };

  Mutex mu;
  std::condition_variable_any work;             // for the thread: a chunk, or stop
  std::condition_variable_any progress;         // for finish(): bytes written, or the thread's end
  std::deque<File> files GUARDED_BY(mu);        // a deque: the thread's File& stays put
  std::map<int, UniqueFd> dirs GUARDED_BY(mu);  // the caller's folder fd -> our dup
  std::deque<Chunk> queue GUARDED_BY(mu);
  std::size_t queued GUARDED_BY(mu) = 0;  // also counts the chunk being written
  std::size_t written GUARDED_BY(mu) = 0;
  // Renames (rotate, publish, close) handed over and not done yet, and done
  // so far: finish() waits for them too.
  std::size_t renames_queued GUARDED_BY(mu) = 0;
  std::size_t renames_done GUARDED_BY(mu) = 0;
  std::vector<Failure> failures GUARDED_BY(mu);
  bool stop GUARDED_BY(mu) = false;
  bool exited GUARDED_BY(mu) = false;
  boost::asio::io_context* io GUARDED_BY(mu) = nullptr;
  bool posted GUARDED_BY(mu) = false;
  std::function<void()> on_progress;  // the loop's alone

  // From the thread, with mu held: tell the loop, once until it has run.
  void notify_loop(const std::shared_ptr<State>& self) REQUIRES(mu) {
    progress.notify_all();
    if (io == nullptr || posted) return;
    posted = true;
    boost::asio::post(*io, [weak = std::weak_ptr<State>(self)] {
      const auto s = weak.lock();
      if (!s) return;
      {
        MutexLock lock(s->mu);
        s->posted = false;
      }
      if (s->on_progress) s->on_progress();
    });
  }

  // With mu held: the file stops; what is queued for it is dropped. Returns
  // the fd to close, which the caller does without the lock (a close(2) may
  // flush, and wait on the disk).
  [[nodiscard]] UniqueFd fail(Target t, int err, bool creating) REQUIRES(mu) {
    File& f = files[t];
    f.failed = true;
    UniqueFd to_close = std::move(f.owned);
    f.fd = -1;
    failures.push_back({.target = t, .label = f.label, .error = err, .creating = creating});
    for (auto it = queue.begin(); it != queue.end();) {
      if (it->target == t) {
        queued -= it->data.size();
        if (it->rotate) {
          --renames_queued;
          ++renames_done;
        }
        it = queue.erase(it);
      } else {
        ++it;
      }
    }
    return to_close;
  }
};

FileWriter::FileWriter() : s_(std::make_shared<State>()) {}

FileWriter::~FileWriter() {
  detach();
  const bool all = finish(kFinishStall);
  {
    MutexLock lock(s_->mu);
    s_->stop = true;
  }
  s_->work.notify_all();
  if (!thread_.joinable()) return;
  bool exited = false;
  if (all) {
    // Closing the files it made may flush them (NFS): wait for that too,
    // as long as a stuck disk is waited for.
    MutexLock lock(s_->mu);
    const auto until = std::chrono::steady_clock::now() + kFinishStall;
    while (!s_->exited && s_->progress.wait_until(s_->mu, until) != std::cv_status::timeout) {
    }
    exited = s_->exited;
  }
  if (exited) {
    thread_.join();
  } else {
    thread_.detach();  // blocked in the kernel; it keeps its own share of s_
  }
}

FileWriter::Target FileWriter::add_fd(int fd, std::string label) {
  // A dup of its own: a thread left behind writes to no number reused since.
  UniqueFd dup(::fcntl(fd, F_DUPFD_CLOEXEC, 3));
  const int err = errno;
  MutexLock lock(s_->mu);
  State::File f;
  f.fd = dup.get();
  f.owned = std::move(dup);
  f.label = std::move(label);
  s_->files.push_back(std::move(f));
  const Target t = s_->files.size() - 1;
  if (s_->files[t].fd < 0) (void)s_->fail(t, err, false);  // nothing open to close
  return t;
}

FileWriter::Target FileWriter::add_file(int dir_fd, std::string name, std::string label,
                                        mode_t mode) {
  MutexLock lock(s_->mu);
  State::File f;
  f.name = std::move(name);
  f.label = std::move(label);
  f.mode = mode;
  auto it = s_->dirs.find(dir_fd);
  int err = 0;
  if (it == s_->dirs.end()) {
    UniqueFd dup(::fcntl(dir_fd, F_DUPFD_CLOEXEC, 3));
    err = errno;
    it = s_->dirs.emplace(dir_fd, std::move(dup)).first;
  }
  f.dir_fd = it->second.get();
  const bool no_dir = f.dir_fd < 0;
  s_->files.push_back(std::move(f));
  const Target t = s_->files.size() - 1;
  if (no_dir) (void)s_->fail(t, err != 0 ? err : EBADF, true);  // nothing open to close
  return t;
}

void FileWriter::write(Target t, std::string_view data) {
  if (data.empty()) return;
  bool wake = false;
  {
    MutexLock lock(s_->mu);
    if (t >= s_->files.size() || s_->files[t].failed) return;
    // The thread waits only on an empty queue: a wake-up otherwise is a
    // system call for nothing.
    wake = s_->queue.empty();
    // The thread takes the front chunk out before writing it: the back one
    // is never being written.
    if (!s_->queue.empty() && s_->queue.back().target == t && !s_->queue.back().rotate &&
        s_->queue.back().data.size() < kFileCoalesce) {
      s_->queue.back().data.append(data);
    } else {
      s_->queue.push_back({.target = t, .data = std::string(data)});
    }
    s_->queued += data.size();
  }
  if (!thread_.joinable()) start();
  if (wake) s_->work.notify_one();
}

void FileWriter::rotate(Target t) { publish(t, {}); }

void FileWriter::close(Target t) {
  std::string name;
  {
    MutexLock lock(s_->mu);
    if (t >= s_->files.size()) return;
    name = s_->files[t].name;
  }
  publish(t, std::move(name));  // renamed to itself: closed, left where it is
}

void FileWriter::publish(Target t, std::string final_name) {
  bool wake = false;
  {
    MutexLock lock(s_->mu);
    if (t >= s_->files.size() || s_->files[t].failed || s_->files[t].dir_fd < 0) return;
    wake = s_->queue.empty();
    s_->queue.push_back(
        {.target = t, .data = {}, .rotate = true, .rename_to = std::move(final_name)});
    ++s_->renames_queued;
  }
  if (!thread_.joinable()) start();
  if (wake) s_->work.notify_one();
}

std::size_t FileWriter::queued() const {
  MutexLock lock(s_->mu);
  return s_->queued;
}

std::size_t FileWriter::written() const {
  MutexLock lock(s_->mu);
  return s_->written;
}

bool FileWriter::failed(Target t) const {
  MutexLock lock(s_->mu);
  return t < s_->files.size() && s_->files[t].failed;
}

std::vector<FileWriter::Failure> FileWriter::take_failures() {
  MutexLock lock(s_->mu);
  return std::exchange(s_->failures, {});
}

void FileWriter::attach(boost::asio::io_context& io, std::function<void()> on_progress) {
  s_->on_progress = std::move(on_progress);
  MutexLock lock(s_->mu);
  s_->io = &io;
  s_->posted = false;
}

void FileWriter::detach() {
  {
    MutexLock lock(s_->mu);
    s_->io = nullptr;
  }
  s_->on_progress = {};
}

bool FileWriter::finish(std::chrono::milliseconds stall) {
  MutexLock lock(s_->mu);
  // Progress: bytes written or renames done.
  std::size_t seen = s_->written + s_->renames_done;
  auto until = std::chrono::steady_clock::now() + stall;
  while (s_->queued > 0 || s_->renames_queued > 0) {
    if (s_->progress.wait_until(s_->mu, until) != std::cv_status::timeout) continue;
    if (s_->written + s_->renames_done == seen) return false;
    seen = s_->written + s_->renames_done;
    until = std::chrono::steady_clock::now() + stall;
  }
  return true;
}

void FileWriter::start() {
  thread_ = start_thread_without_signals([s = s_] { run(s); });
}

void FileWriter::run(const std::shared_ptr<State>& s) {
  MutexLock lock(s->mu);
  for (;;) {
    while (!s->stop && s->queue.empty()) s->work.wait(s->mu);
    if (s->stop) break;
    State::Chunk chunk = std::move(s->queue.front());
    s->queue.pop_front();
    State::File& f = s->files[chunk.target];
    if (f.failed) {  // (fail() takes a failed file's chunks out of the queue)
      s->queued -= chunk.data.size();
      if (chunk.rotate) {
        --s->renames_queued;
        ++s->renames_done;
        s->progress.notify_all();
      }
      continue;
    }
    if (chunk.rotate) {
      UniqueFd old = std::move(f.owned);
      f.fd = -1;
      const int dir = f.dir_fd;
      const std::string name = f.name;
      const std::string to = chunk.rename_to.empty() ? name + ".1" : chunk.rename_to;
      s->mu.unlock();
      old.reset();  // (a close may flush, and wait on the disk)
      // Not made yet (nothing written since the last rotation): nothing to move.
      const bool moved = ::renameat(dir, name.c_str(), dir, to.c_str()) == 0;
      const int err = errno;
      s->mu.lock();
      --s->renames_queued;
      ++s->renames_done;
      if (!moved && err != ENOENT) {
        (void)s->fail(chunk.target, err, false);  // closed above
        s->notify_loop(s);
      }
      s->progress.notify_all();
      continue;
    }
    if (f.fd < 0) {
      // Created here, not on the loop: openat(2) on a hung mount blocks too.
      const int dir = f.dir_fd;
      const std::string name = f.name;
      const mode_t mode = f.mode;
      s->mu.unlock();
      UniqueFd fd(
          ::openat(dir, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
      const int err = errno;
      s->mu.lock();
      if (!fd) {
        s->queued -= chunk.data.size();
        (void)s->fail(chunk.target, err, true);  // nothing open to close
        s->notify_loop(s);
        continue;
      }
      f.fd = fd.get();
      f.owned = std::move(fd);
    }
    const int fd = f.fd;
    std::string_view left(chunk.data);
    int err = 0;
    while (!left.empty()) {
      s->mu.unlock();
      const ssize_t n = ::write(fd, left.data(), left.size());
      err = n < 0 ? errno : 0;
      s->mu.lock();
      if (n > 0) {
        left.remove_prefix(static_cast<std::size_t>(n));
        s->queued -= static_cast<std::size_t>(n);
        s->written += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && err == EINTR) continue;
      if (n == 0) err = EIO;
      break;
    }
    if (!left.empty()) {
      s->queued -= left.size();
      UniqueFd to_close = s->fail(chunk.target, err, false);
      s->notify_loop(s);
      s->mu.unlock();
      to_close.reset();
      s->mu.lock();
      continue;
    }
    s->notify_loop(s);
  }
  // Close what this writer made (a flush, on NFS) before saying it is done.
  for (auto& f : s->files) {
    UniqueFd owned = std::move(f.owned);
    f.fd = -1;
    s->mu.unlock();
    owned.reset();
    s->mu.lock();
  }
  s->exited = true;
  s->progress.notify_all();
}

}  // namespace dlaunch
