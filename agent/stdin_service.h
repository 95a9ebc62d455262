// --stdin on the agent, as a node service (service.h): the head's StdinData
// goes into the stdin pipe of each worker of this node that reads it
// (WorkerSpec::stdin_pipe; the service makes the pipe at spawn and gives the
// worker its read end), without ever blocking the loop: the pipes are
// non-blocking, what does not fit waits in the worker's queue until the pipe
// has room. The head never has more than proto::kStdinWindow bytes
// unacknowledged here (StdinAck), so a queue holds at most that much. A
// worker that exits, or closes its stdin, has its data dropped (and
// acknowledged). StdinEof closes each pipe once its queue is written: the
// worker reads EOF.
//
// Thread safety: none; the agent's event loop only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include "dlaunch/unique_fd.h"
#include "service.h"

namespace dlaunch::agent {

class StdinService final : public NodeService {
 public:
  StdinService(boost::asio::io_context& io, NodeAccess& node) : io_(io), node_(node) {}
  StdinService(const StdinService&) = delete;
  StdinService& operator=(const StdinService&) = delete;

  std::optional<std::string> prepare(const proto::Setup& setup, proto::Ready& ready) override;
  bool handle(const proto::Message& msg) override;
  void before_spawn(int rank, WorkerGift& gift) override;
  void after_spawn(int rank, bool spawned) override;
  void on_worker_exit(int rank) override;
  void stop() override;

 private:
  // The write end of a worker's stdin pipe: what the head sent that the
  // worker has not read yet.
  struct Pipe {
    Pipe(boost::asio::io_context& io, int fd) : pipe(io, fd) {}
    boost::asio::posix::stream_descriptor pipe;  // non-blocking
    std::deque<std::string> queue;
    std::size_t offset = 0;   // of the first chunk, already written
    std::uint64_t taken = 0;  // bytes of the whole stream written into the pipe
    bool writing = false;     // waiting for room in the pipe
    bool closed = false;      // EOF given, the worker gone, or it closed its end
  };

  void data(const std::string& bytes);
  void eof();
  void write(Pipe& in);
  static void close(Pipe& in);
  void ack();

  boost::asio::io_context& io_;
  NodeAccess& node_;
  std::set<int> readers_;                       // the ranks that read stdin (Setup)
  std::map<int, UniqueFd> pending_;             // write ends of pipes being spawned
  std::map<int, std::unique_ptr<Pipe>> pipes_;  // by rank, once spawned
  std::uint64_t received_ = 0;                  // StdinData bytes so far
  std::uint64_t acked_ = 0;                     // what StdinAck said last
  bool eof_ = false;
};

}  // namespace dlaunch::agent
