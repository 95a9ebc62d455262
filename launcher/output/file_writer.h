// FileWriter: writes to regular files on a thread of its own, so that a disk
// that stops answering (a hung NFS server, a frozen or failing filesystem)
// holds that thread and not the event loop (issue 17). Before it, dlaunch's
// stdout redirected to a file on such a disk, or --output-dir there, stopped
// the controller in write(2): no heartbeat went out, and past the heartbeat
// timeout every agent stopped the job.
//
// The loop hands bytes over (write(): a lock and a copy, never I/O); the
// thread writes them in order, each file's bytes in the order given, with
// plain blocking write(2) (a regular file never says EAGAIN, and poll(2)
// always says "ready" for one: there is no non-blocking way to write a
// slow disk). Files added by name are created by the thread too (openat(2)
// on a hung mount blocks as well), relative to a folder fd of their own.
//
// What is handed over and not yet written counts in queued(): the Console
// adds it to its own queue for back-pressure, so that a stuck disk pauses the
// agents' output at the high-water mark instead of growing without bound.
// After writing, or when a file fails, the thread posts on_progress to the
// attached loop (at most one pending at a time). A file that fails (ENOSPC,
// EIO, EDQUOT; or cannot be created) is not written again and its queued
// bytes are dropped; take_failures() says which, once each.
//
// At the end finish() waits while the thread makes progress; a disk that
// takes nothing for the given time is given up on (the destructor uses
// kFinishStall). A thread still blocked in write(2) then is left behind
// (detached; the process's exit ends it: writes on NFS and frozen
// filesystems are killable) and holds its own share of the state.
//
// write(), add_*() and the accessors are for one thread (the loop); the
// writing thread is started at the first write. All signals are blocked in
// it: they are the loop's.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>

namespace dlaunch {

class FileWriter {
 public:
  using Target = std::size_t;
  struct Failure {
    Target target = 0;
    std::string label;
    int error = 0;
    bool creating = false;  // the file could not be created (else: a write failed)
  };
  static constexpr std::chrono::milliseconds kFinishStall{2000};

  FileWriter();
  ~FileWriter();  // finish(kFinishStall), then the thread stops (or is left behind)
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  // A file dlaunch has open (fd is not taken: the writer writes to a dup).
  Target add_fd(int fd, std::string label);
  // A new file `name` in the folder dir_fd (dup'd: the caller's may close):
  // created by the thread at its first write, O_EXCL|O_NOFOLLOW, `mode`.
  Target add_file(int dir_fd, std::string name, std::string label, mode_t mode);

  // Hands data over; never blocks on I/O. Dropped for a failed file.
  void write(Target t, std::string_view data);
  // For a file made by add_file: after what was handed over so far, the
  // thread closes it and renames it to NAME.1 (replacing one there), and
  // the next write() creates NAME anew. A failed rename fails the file.
  void rotate(Target t);
  // For a file made by add_file: after what was handed over so far, the
  // thread closes it and renames it to `final_name` in the same folder, so
  // that it appears there whole (a reader waiting for that name never sees
  // half of it). Nothing is written to it afterwards.
  void publish(Target t, std::string final_name);
  // For a file made by add_file: closed once what was handed over is
  // written; nothing is written to it afterwards.
  void close(Target t);

  std::size_t queued() const;   // bytes handed over, not yet written or dropped
  std::size_t written() const;  // bytes written, all files
  bool failed(Target t) const;
  std::vector<Failure> take_failures();  // the failures not taken yet

  // on_progress runs on io after the thread wrote something or a file failed.
  void attach(boost::asio::io_context& io, std::function<void()> on_progress);
  void detach();

  // Waits until all is written and renamed (true), or until nothing was
  // written or renamed for `stall` (false).
  bool finish(std::chrono::milliseconds stall);

 private:
  struct State;
  void start();
  static void run(const std::shared_ptr<State>& s);

  std::shared_ptr<State> s_;
  std::thread thread_;
};

}  // namespace dlaunch
