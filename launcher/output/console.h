// Console: dlaunch's own stdout and stderr, written without ever blocking
// the event loop (issue 17). A reader that stops reading (a paused `| less`,
// Ctrl-S, tmux copy mode, a slow `| tee`) used to stop dlaunch in write(2):
// no heartbeat went out, and every agent stopped the job.
//
// How a stream is written without blocking, by what fd 1 (or 2) is:
//  - a pipe, FIFO, terminal or other character device: dlaunch opens it
//    again through /proc/self/fd/N with O_NONBLOCK. That is a new open file
//    description: the one dlaunch inherited, which the shell (and whatever
//    else shares the terminal) holds too, keeps its flags. Setting
//    O_NONBLOCK on the inherited one would leave the shell's terminal
//    non-blocking if dlaunch died before putting it back (SIGKILL), and
//    programs sharing it would see EAGAIN meanwhile. Only where the reopen
//    fails (no /proc; a terminal of another user after su; a FIFO whose
//    reader is gone) is O_NONBLOCK set on a dup of the inherited fd, and put
//    back as it was when the Console is destroyed.
//  - a socket: send(2) with MSG_DONTWAIT on a dup; nothing is changed.
//  - a regular file or block device: handed to the Console's FileWriter,
//    whose thread writes it (output/file_writer.h): a disk that stops
//    answering (a hung NFS server) holds that thread, not the loop. Its
//    bytes not yet written count in Console::queued(), for back-pressure,
//    like the per-rank files of --output-dir (write_file()).
// What the fd does not take at once is queued, in order, and written when
// poll says the fd takes more (on the Asio loop once attach()ed). Lines are
// queued whole, one batch after the other, so they stay whole and in order;
// stdout and stderr have a queue each (one stalled reader does not hold the
// other stream).
//
// Back-pressure: past kHighWater bytes queued (both streams together),
// on_pressure(true) is called once; the controller then sends every agent
// PauseOutput{true}, and the agents stop reading their workers' pipes while
// heartbeats, exit reports and everything else keep flowing. Under kLowWater,
// on_pressure(false) resumes them. Output already on its way when the agents
// pause still arrives and is queued (at most about an agent's own 1 MiB
// channel watermark, plus what a pipe or SSH channel holds, per agent): the
// queue is bounded by kHighWater plus that. Nothing is dropped while a
// reader is there.
//
// A reader that goes away (EPIPE: `dlaunch ... | head`) stops that stream
// for good: what is queued for it is dropped, silently (SIGPIPE is
// ignored), and, for stdout, on_stdout_gone is called once (from the loop):
// the controller then ends the job as a pipeline stage ends (exit 141), or
// lets it go on under --nohup. Any other
// write error (EIO on a hung-up terminal, ENOSPC on a file) stops the stream
// too, and is said once on stderr (if stderr is not the one that failed); so
// is a per-rank file that cannot be created or written.
//
// Used from one thread (the loop); the FileWriter has a thread of its own.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/io_context.hpp>

#include "dlaunch/unique_fd.h"
#include "output/file_writer.h"

namespace dlaunch {

class ConsoleStream {
 public:
  // fd is not taken: dlaunch keeps its fd 1 and 2 (see the header comment for
  // what is opened or dup'd). name: "stdout", "stderr", for messages. files:
  // where a regular file is written (it must outlive this stream).
  ConsoleStream(int fd, std::string name, FileWriter& files);
  ~ConsoleStream();
  ConsoleStream(const ConsoleStream&) = delete;
  ConsoleStream& operator=(const ConsoleStream&) = delete;

  // Writes now what the fd takes without blocking; queues the rest.
  void write(std::string_view data);
  // Writes what is queued, as far as the fd takes it now. Returns bytes written.
  std::size_t flush_some();
  std::size_t queued() const { return queued_; }
  // Stopped for good (EPIPE or another error): writes are dropped.
  bool closed() const { return closed_; }
  // Stopped because the reader went away (EPIPE).
  bool reader_gone() const { return reader_gone_; }
  // Why it stopped, for an error other than EPIPE; empty otherwise.
  const std::string& error() const { return error_; }
  // The fd to wait on for POLLOUT; -1 when none (closed, or writes never wait).
  int wait_fd() const;
  // Bytes written by this stream, in all (not those of a file, which the
  // FileWriter counts).
  std::size_t written() const { return written_; }
  // A regular file: the FileWriter's target for it; else none.
  std::optional<FileWriter::Target> file_target() const;
  // Stops the stream for good after an error (errno value; EPIPE is quiet).
  void close_with(int err);

 private:
  // kFile: a regular file or block device, written by the FileWriter;
  // kBlocking: plain write(2), where no fd of our own could be made.
  enum class Mode { kClosed, kNonBlocking, kSocket, kFile, kBlocking };
  // One write(2)/send(2): bytes written, 0 on EAGAIN, -1 on error (closes).
  long write_once(std::string_view data);

  std::string name_;
  FileWriter& files_;
  FileWriter::Target target_ = 0;  // kFile
  Mode mode_ = Mode::kClosed;
  int fd_ = -1;             // what is written to (ours, unless kBlocking)
  UniqueFd owned_;          // the reopened or dup'd fd
  int restore_flags_ = -1;  // the shared description's flags, when we changed them
  std::deque<std::string> queue_;
  std::size_t front_done_ = 0;  // bytes of queue_.front() already written
  std::size_t queued_ = 0;
  std::size_t written_ = 0;
  bool closed_ = false;
  bool reader_gone_ = false;
  std::string error_;
};

class Console {
 public:
  static constexpr std::size_t kHighWater = 4u << 20;
  static constexpr std::size_t kLowWater = 1u << 20;

  Console(int stdout_fd, int stderr_fd, std::size_t high_water = kHighWater,
          std::size_t low_water = kLowWater);
  ~Console();
  Console(const Console&) = delete;
  Console& operator=(const Console&) = delete;

  void write(bool to_stderr, std::string_view data);
  // A new file `name` in the folder dir_fd (a per-rank file of --output-dir),
  // created and written by the FileWriter; `label` names it in messages.
  FileWriter::Target add_file(int dir_fd, std::string name, std::string label, mode_t mode);
  // A file already open (fd is not taken: the FileWriter writes to a dup).
  FileWriter::Target add_open_file(int fd, std::string label);
  void write_file(FileWriter::Target file, std::string_view data);
  void rotate_file(FileWriter::Target file) { files_.rotate(file); }
  void publish_file(FileWriter::Target file, std::string final_name) {
    files_.publish(file, std::move(final_name));
  }
  void close_file(FileWriter::Target file) { files_.close(file); }
  std::size_t queued() const { return out_.queued() + err_.queued() + files_.queued(); }
  std::size_t written() const { return out_.written() + err_.written() + files_.written(); }
  bool over_high_water() const { return high_; }
  // Writes what the fds take now (no loop needed); for tests and the end.
  void flush_some();

  // Waits on io for the fds to take what is queued. on_pressure(true): the
  // queue passed the high-water mark; (false): it fell under the low one.
  // on_empty: everything queued is written (or dropped). Both may be empty.
  void attach(boost::asio::io_context& io, std::function<void(bool)> on_pressure,
              std::function<void()> on_empty = {});
  void detach();
  void set_on_empty(std::function<void()> on_empty) { on_empty_ = std::move(on_empty); }
  // Called once, posted to the loop of attach(), when stdout's reader has
  // gone for good (EPIPE).
  void set_on_stdout_gone(std::function<void()> f) { on_stdout_gone_ = std::move(f); }

  ConsoleStream& out() { return out_; }
  ConsoleStream& err() { return shared_ ? out_ : err_; }
  // stdout and stderr are one pipe, FIFO, socket or terminal (`2>&1 | less`,
  // an interactive shell): both go through out(), in the order written, so
  // that a line of one is never cut by a line of the other when the reader
  // takes part of a write.
  bool shared() const { return shared_; }

 private:
  struct Waiter;
  void after_write();
  void check_high();
  void report_errors();
  void arm(bool to_stderr);

  FileWriter files_;  // before the streams, which use it
  bool shared_;       // before err_, which is not opened when set
  ConsoleStream out_;
  ConsoleStream err_;
  std::size_t high_water_;
  std::size_t low_water_;
  bool high_ = false;
  bool out_error_said_ = false;
  bool stdout_gone_said_ = false;
  std::function<void()> on_stdout_gone_;
  boost::asio::io_context* io_ = nullptr;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // for what is posted
  std::function<void(bool)> on_pressure_;
  std::function<void()> on_empty_;
  std::unique_ptr<Waiter> waiter_[2];  // stdout, stderr: while attached
};

}  // namespace dlaunch
