#include "output/console.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

namespace dlaunch {

namespace asio = boost::asio;

namespace {
constexpr std::size_t kConsoleCoalesce = 64 * 1024;  // small batches join the last queued chunk
// A terminal can say "writable" and then take nothing (a stopped tty after
// Ctrl-S, on some drivers): after this many such wake-ups in a row the next
// try waits on a timer instead, so that dlaunch does not spin.
constexpr int kSpuriousWakeups = 2;
constexpr auto kRetryAfter = std::chrono::milliseconds(20);

// Whether two fds reach one pipe, FIFO, socket or terminal. Two writers on
// one such stream interleave at whatever byte a non-blocking write stopped;
// regular files are left apart (the FileWriter writes whole chunks to each).
bool same_stream(int a, int b) {
  struct stat sa {};
  struct stat sb {};
  if (a < 0 || b < 0 || ::fstat(a, &sa) != 0 || ::fstat(b, &sb) != 0) return false;
  if (S_ISREG(sa.st_mode) || S_ISBLK(sa.st_mode)) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino && sa.st_rdev == sb.st_rdev;
}
}  // namespace

ConsoleStream::ConsoleStream(int fd, std::string name, FileWriter& files)
    : name_(std::move(name)), files_(files) {
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0) {
    closed_ = true;  // no such stream: what goes there is dropped
    return;
  }
  if (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode)) {
    // Never EAGAIN, and a stuck disk blocks: the FileWriter's thread writes it.
    mode_ = Mode::kFile;
    fd_ = fd;
    target_ = files_.add_fd(fd, name_);
    return;
  }
  if (S_ISSOCK(st.st_mode)) {
    owned_.reset(::fcntl(fd, F_DUPFD_CLOEXEC, 3));
    mode_ = owned_ ? Mode::kSocket : Mode::kBlocking;
    fd_ = owned_ ? owned_.get() : fd;
    return;
  }
  // A pipe, FIFO or terminal: a description of our own, non-blocking, leaves
  // the inherited one (the shell's) as it is.
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  UniqueFd again(::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  struct stat st2 {};
  if (again && ::fstat(again.get(), &st2) == 0 && st2.st_dev == st.st_dev &&
      st2.st_ino == st.st_ino) {
    owned_ = std::move(again);
    mode_ = Mode::kNonBlocking;
    fd_ = owned_.get();
    return;
  }
  // Last resort: O_NONBLOCK on the shared description, put back at the end.
  owned_.reset(::fcntl(fd, F_DUPFD_CLOEXEC, 3));
  if (!owned_) {
    mode_ = Mode::kBlocking;
    fd_ = fd;
    return;
  }
  const int flags = ::fcntl(owned_.get(), F_GETFL);
  if (flags >= 0 && (flags & O_NONBLOCK) == 0 &&
      ::fcntl(owned_.get(), F_SETFL, flags | O_NONBLOCK) == 0) {
    restore_flags_ = flags;
  }
  mode_ = Mode::kNonBlocking;
  fd_ = owned_.get();
}

ConsoleStream::~ConsoleStream() {
  if (restore_flags_ >= 0 && owned_) ::fcntl(owned_.get(), F_SETFL, restore_flags_);
}

int ConsoleStream::wait_fd() const {
  if (closed_ || mode_ == Mode::kBlocking || mode_ == Mode::kFile) return -1;
  return fd_;
}

std::optional<FileWriter::Target> ConsoleStream::file_target() const {
  if (mode_ != Mode::kFile) return std::nullopt;
  return target_;
}

void ConsoleStream::close_with(int err) {
  closed_ = true;
  reader_gone_ = err == EPIPE;
  if (err != EPIPE) error_ = std::strerror(err);
  queue_.clear();
  front_done_ = 0;
  queued_ = 0;
}

long ConsoleStream::write_once(std::string_view data) {
  for (;;) {
    const ssize_t n = mode_ == Mode::kSocket
                          ? ::send(fd_, data.data(), data.size(), MSG_DONTWAIT | MSG_NOSIGNAL)
                          : ::write(fd_, data.data(), data.size());
    if (n > 0) {
      written_ += static_cast<std::size_t>(n);
      return static_cast<long>(n);
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    close_with(n < 0 ? errno : EIO);
    return -1;
  }
}

void ConsoleStream::write(std::string_view data) {
  if (closed_ || data.empty()) return;
  if (mode_ == Mode::kFile) {
    files_.write(target_, data);
    return;
  }
  if (queue_.empty()) {
    // Straight out, as far as the fd takes it (a blocking one takes all).
    while (!data.empty()) {
      const long n = write_once(data);
      if (n < 0) return;
      if (n == 0) break;
      data.remove_prefix(static_cast<std::size_t>(n));
    }
    if (data.empty()) return;
  }
  if (!queue_.empty() && queue_.back().size() < kConsoleCoalesce) {
    queue_.back().append(data);
  } else {
    queue_.emplace_back(data);
  }
  queued_ += data.size();
}

std::size_t ConsoleStream::flush_some() {
  std::size_t total = 0;
  while (!closed_ && !queue_.empty()) {
    const std::string& front = queue_.front();
    const long n = write_once(std::string_view(front).substr(front_done_));
    if (n <= 0) break;
    total += static_cast<std::size_t>(n);
    front_done_ += static_cast<std::size_t>(n);
    queued_ -= static_cast<std::size_t>(n);
    if (front_done_ == front.size()) {
      queue_.pop_front();
      front_done_ = 0;
    }
  }
  return total;
}

// What waits on the loop for one stream to take more.
struct Console::Waiter {
  Waiter(asio::io_context& io, int fd) : sd(io), timer(io) {
    UniqueFd dup(::fcntl(fd, F_DUPFD_CLOEXEC, 3));
    if (!dup) throw boost::system::system_error(errno, boost::system::system_category());
    sd.assign(dup.get());
    dup.release();
  }
  ~Waiter() {
    *alive = false;
    boost::system::error_code ignored;
    sd.close(ignored);
  }
  Waiter(const Waiter&) = delete;
  Waiter& operator=(const Waiter&) = delete;
  asio::posix::stream_descriptor sd;  // a dup: closing it leaves ours
  asio::steady_timer timer;
  bool waiting = false;
  int spurious = 0;
  std::shared_ptr<bool> alive = std::make_shared<bool>(true);
};

Console::Console(int stdout_fd, int stderr_fd, std::size_t high_water, std::size_t low_water)
    : shared_(same_stream(stdout_fd, stderr_fd)),
      out_(stdout_fd, "stdout", files_),
      err_(shared_ ? -1 : stderr_fd, "stderr", files_),
      high_water_(high_water),
      low_water_(low_water) {}

Console::~Console() {
  *alive_ = false;
  detach();
}

void Console::write(bool to_stderr, std::string_view data) {
  (to_stderr ? err() : out_).write(data);
  report_errors();
  check_high();
  arm(to_stderr && !shared_);
  if (!to_stderr) arm(true);  // a note about stdout may have gone to stderr
}

FileWriter::Target Console::add_open_file(int fd, std::string label) {
  return files_.add_fd(fd, std::move(label));
}

FileWriter::Target Console::add_file(int dir_fd, std::string name, std::string label, mode_t mode) {
  return files_.add_file(dir_fd, std::move(name), std::move(label), mode);
}

void Console::write_file(FileWriter::Target file, std::string_view data) {
  files_.write(file, data);
  check_high();
}

void Console::check_high() {
  if (!high_ && queued() > high_water_) {
    high_ = true;
    if (on_pressure_) on_pressure_(true);
  }
}

void Console::flush_some() {
  out_.flush_some();
  err_.flush_some();
  after_write();
}

void Console::attach(asio::io_context& io, std::function<void(bool)> on_pressure,
                     std::function<void()> on_empty) {
  detach();
  io_ = &io;
  on_pressure_ = std::move(on_pressure);
  on_empty_ = std::move(on_empty);
  files_.attach(io, [this] { after_write(); });
  for (int k = 0; k < 2; ++k) {
    const int fd = (k == 0 ? out_ : err_).wait_fd();
    if (fd < 0) continue;
    try {
      waiter_[k] = std::make_unique<Waiter>(io, fd);
    } catch (const boost::system::system_error&) {
      // Not a descriptor the loop can wait on (dup failed, epoll refused it):
      // what stays queued goes out with the next write or flush_some().
    }
  }
  arm(false);
  arm(true);
}

void Console::detach() {
  files_.detach();
  waiter_[0].reset();
  waiter_[1].reset();
  on_pressure_ = {};
  on_empty_ = {};
  io_ = nullptr;
}

// Once per stream error other than EPIPE, on stderr (if that still works);
// once per file the FileWriter gave up on.
void Console::report_errors() {
  for (const auto& f : files_.take_failures()) {
    if (f.target == out_.file_target()) {
      out_.close_with(f.error);
    } else if (f.target == err_.file_target()) {
      err_.close_with(f.error);
    } else {
      err().write("dlaunch: " + std::string(f.creating ? "cannot create" : "stopped writing") +
                  " '" + f.label + "': " + std::strerror(f.error) +
                  " (the job goes on; this file stays incomplete)\n");
    }
  }
  if (out_.reader_gone() && !stdout_gone_said_ && on_stdout_gone_ && io_ != nullptr) {
    stdout_gone_said_ = true;
    // Not from inside a write, which may be the controller's own.
    asio::post(*io_, [f = on_stdout_gone_, alive = alive_] {
      if (*alive) f();
    });
  }
  if (out_error_said_ || !out_.closed() || out_.error().empty()) return;
  out_error_said_ = true;
  err().write("dlaunch: stopped writing to stdout (" + out_.error() +
              "); the job goes on without it\n");
}

void Console::after_write() {
  report_errors();
  if (high_ && queued() < low_water_) {
    high_ = false;
    if (on_pressure_) on_pressure_(false);
  }
  if (queued() == 0 && on_empty_) on_empty_();
}

void Console::arm(bool to_stderr) {
  Waiter* w = waiter_[to_stderr ? 1 : 0].get();
  ConsoleStream& s = to_stderr ? err_ : out_;
  if (w == nullptr || w->waiting || s.queued() == 0 || s.wait_fd() < 0) return;
  w->waiting = true;
  auto on_ready = [this, w, to_stderr, alive = w->alive](boost::system::error_code ec) {
    if (!*alive) return;
    w->waiting = false;
    if (ec == asio::error::operation_aborted) return;
    ConsoleStream& st = to_stderr ? err_ : out_;
    const std::size_t n = st.flush_some();
    w->spurious = (n == 0 && st.queued() > 0) ? w->spurious + 1 : 0;
    after_write();
    arm(false);
    arm(true);
  };
  if (w->spurious >= kSpuriousWakeups) {
    w->timer.expires_after(kRetryAfter);
    w->timer.async_wait(std::move(on_ready));
  } else {
    w->sd.async_wait(asio::posix::stream_descriptor::wait_write, std::move(on_ready));
  }
}

}  // namespace dlaunch
