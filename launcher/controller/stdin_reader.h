// dlaunch's stdin, read on the controller's loop for --stdin (docs/mpmd.md,
// section "stdin"). Pipes, terminals and sockets are waited on (epoll); a
// regular file or a device epoll cannot wait on (/dev/null) is read in steps
// posted to the loop. The descriptor's flags are left as they are (a
// terminal's O_NONBLOCK is shared with the shell), and a terminal is left in
// its mode (canonical: lines arrive when Enter is pressed, Ctrl-D ends the
// input). A terminal whose foreground process group is not dlaunch's (a job
// put in the background) is not read: the input ends there, rather than
// dlaunch being stopped by SIGTTIN. A closed descriptor ends at once.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

namespace dlaunch {

class StdinReader {
 public:
  using DataFn = std::function<void(std::string data)>;
  using EofFn = std::function<void()>;
  // Reads fd (not owned: a duplicate is) from now on, at most chunk bytes a
  // time, until EOF or destruction; on_eof is called once.
  StdinReader(boost::asio::io_context& io, int fd, std::size_t chunk, DataFn on_data, EofFn on_eof);
  ~StdinReader();
  StdinReader(const StdinReader&) = delete;
  StdinReader& operator=(const StdinReader&) = delete;

  // While held, nothing is read (the receivers' window is full).
  void hold(bool held);
  bool ended() const { return eof_; }

 private:
  void next();
  void read_once();
  void end();

  boost::asio::io_context& io_;
  int fd_ = -1;                                                      // the duplicate
  std::unique_ptr<boost::asio::posix::stream_descriptor> waitable_;  // null: read in steps
  std::size_t chunk_;
  DataFn on_data_;
  EofFn on_eof_;
  bool held_ = false;
  bool busy_ = false;  // a wait or a posted read is outstanding
  bool eof_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace dlaunch
