#include "controller/stdin_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include <boost/asio/post.hpp>

namespace dlaunch {

namespace asio = boost::asio;

StdinReader::StdinReader(asio::io_context& io, int fd, std::size_t chunk, DataFn on_data,
                         EofFn on_eof)
    : io_(io), chunk_(chunk), on_data_(std::move(on_data)), on_eof_(std::move(on_eof)) {
  fd_ = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
  if (fd_ >= 0) {
    struct stat st {};
    const bool regular = ::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode);
    if (!regular) {
      auto d = std::make_unique<asio::posix::stream_descriptor>(io_);
      boost::system::error_code ec;
      d->assign(fd_, ec);  // fails for what epoll cannot wait on: read in steps
      if (!ec) waitable_ = std::move(d);
    }
  }
  next();
}

StdinReader::~StdinReader() {
  *alive_ = false;
  if (waitable_) {
    boost::system::error_code ec;
    waitable_->cancel(ec);
    waitable_->close(ec);  // closes fd_
  } else if (fd_ >= 0) {
    ::close(fd_);
  }
}

void StdinReader::hold(bool held) {
  held_ = held;
  next();
}

void StdinReader::end() {
  if (eof_) return;
  eof_ = true;
  on_eof_();
}

void StdinReader::next() {
  if (held_ || busy_ || eof_) return;
  busy_ = true;
  std::weak_ptr<bool> alive = alive_;
  if (fd_ < 0) {
    asio::post(io_, [this, alive] {
      if (alive.expired()) return;
      busy_ = false;
      end();
    });
  } else if (waitable_) {
    waitable_->async_wait(asio::posix::stream_descriptor::wait_read,
                          [this, alive](boost::system::error_code ec) {
                            if (alive.expired() || ec == asio::error::operation_aborted) return;
                            busy_ = false;
                            if (ec) {
                              end();
                              return;
                            }
                            read_once();
                          });
  } else {
    asio::post(io_, [this, alive] {
      if (alive.expired()) return;
      busy_ = false;
      read_once();
    });
  }
}

void StdinReader::read_once() {
  if (eof_) return;
  // A terminal of another foreground job: reading would stop dlaunch
  // (SIGTTIN). The input ends here instead.
  if (::isatty(fd_) == 1 && ::tcgetpgrp(fd_) != ::getpgrp()) {
    end();
    return;
  }
  std::string buf(chunk_, '\0');
  const ssize_t n = ::read(fd_, buf.data(), buf.size());
  if (n > 0) {
    buf.resize(static_cast<std::size_t>(n));
    on_data_(std::move(buf));
  } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
    end();
    return;
  }
  next();
}

}  // namespace dlaunch
