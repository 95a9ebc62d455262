// Stacks of the running ranks, for locating hangs (the head's CollectStacks).
//
// For every rank running when asked, the agent runs a stack tool on it as its
// own child, on its event loop: eu-stack (elfutils) when on PATH, else gdb
// (ranks in a container: gdb first, whose default sysroot, "target:", reads
// the image's programs and libraries in the rank's mount namespace; eu-stack
// reads the host's files, and frames of the image's own come out as bare
// addresses or wrong names);
// at most kParallelTools at once, each within a time limit and with its
// output bounded. The agent is the ranks' parent (and their subreaper), so
// Yama's ptrace_scope 1 lets it (and so its children) trace them.
//
// With CollectStacks::python_abort (the head is stopping the job), each
// Python rank then gets SIGABRT: with PYTHONFAULTHANDLER=1 (the head sets it
// unless the user did) Python prints every thread's traceback on stderr
// before it dies. The agent keeps what the rank writes to stderr from then
// on, until it exits or kPythonWait passes, and sends faulthandler's part of
// it with the native stack. Core dumps of those ranks are turned off first
// (RLIMIT_CORE 0): the abort is ours, not a crash.
//
// Those Python ranks are stopped (SIGSTOP) as soon as the request arrives,
// before any stack tool runs, and continued only with the SIGABRT already
// pending (on the main thread, tgkill), so that it is handled before the
// rank runs another line, and the main thread is faulthandler's current one. Without
// that, the first rank to die (here or on a node whose agent got there
// sooner) breaks its peers' collective (a gloo all_reduce raises "connection
// closed") and they are found unwinding an exception, or with no Python
// frame at all, instead of where they hung. The agents get the request at
// about the same time and none aborts before its stack tools are done, so
// every rank of the job is stopped before any dies; a node whose request
// travels longer than another node's tools take is not covered. A run that
// ends before its Python phase continues the ranks it stopped.
//
// One request at a time: a new one ends the one in progress (it is answered
// with what it has).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include "dlaunch/clock.h"
#include "dlaunch/proto/protocol.h"
#include "os.h"
#include "service.h"

namespace dlaunch::agent {

inline constexpr std::size_t kParallelTools = 4;
inline constexpr std::chrono::milliseconds kPythonWait{2000};

// The stacks as a node service (service.h): the head's CollectStacks, the
// ranks' stderr while a Python rank dumps its stacks, and their exits.
class StacksService final : public NodeService {
 public:
  StacksService(boost::asio::io_context& io, Clock& clock, AgentOs& os, NodeAccess& node)
      : io_(io), clock_(clock), os_(os), node_(node) {}
  ~StacksService() override;
  StacksService(const StacksService&) = delete;
  StacksService& operator=(const StacksService&) = delete;

  bool handle(const proto::Message& msg) override;
  void on_output(int rank, proto::Stream stream, std::string_view data) override;
  void on_worker_exit(int rank) override;
  void stop() override { run_.reset(); }

 private:
  struct Run {
    struct Item {
      proto::RankStack out;
      bool python = false;
      pid_t tool_pid = -1;
      std::unique_ptr<boost::asio::posix::stream_descriptor> pipe;
      std::unique_ptr<Timer> limit;
      bool started = false;
      bool done = false;
      bool frozen = false;   // SIGSTOP sent and no SIGCONT yet
      bool aborted = false;  // SIGABRT sent; its stderr is kept until it exits
      bool exited = false;
    };
    std::uint64_t id = 0;
    AgentOs* os = nullptr;  // ends the tools still at work when the run goes
    proto::CollectStacks request;
    std::string tool;        // "eu-stack", "gdb", or empty
    std::string tool_path;   // where it is
    bool contained = false;  // the ranks run in a container (their own root)
    std::vector<Item> items;
    std::size_t next = 0;
    std::size_t running = 0;
    std::size_t byte_limit = proto::kMaxStackBytes;
    std::chrono::milliseconds tool_limit{5000};
    std::unique_ptr<Timer> deadline;  // the whole request
    std::unique_ptr<Timer> python_wait;
    bool python_phase = false;
    ~Run();
  };

  void collect(const proto::CollectStacks& m);
  void next();
  void read(std::size_t i);
  void tool_done(std::size_t i, const std::string& error);
  void python_phase();
  void thaw(std::size_t i);
  void finish();

  boost::asio::io_context& io_;
  Clock& clock_;
  AgentOs& os_;
  NodeAccess& node_;
  std::unique_ptr<Run> run_;  // a CollectStacks in progress
  std::uint64_t runs_ = 0;    // tells a run's handlers from older ones
};

std::vector<std::string> stack_tool_argv(const std::string& tool, const std::string& path,
                                         pid_t pid);
// What a stack of a rank in a container by eu-stack lacks (no gdb on the node).
inline constexpr const char* kHostFilesNote =
    "the rank runs in a container and this node has no gdb: eu-stack read the host's files "
    "for the image's programs and libraries, so frames of the image's own may be missing or "
    "wrong (install gdb on the node)";
// Whether a tool's output holds a stack (frame lines "#N ..."); else it is
// an error message.
bool has_frames(std::string_view text);
// Why a tool's output holds no stack, in one line (with a hint when ptrace
// was refused).
std::string stack_tool_error(const std::string& tool, std::string_view text);
// faulthandler's dump in what a rank wrote to stderr: from its "Fatal Python
// error" line (or the first thread header) to the end; empty when none.
std::string python_dump(std::string_view stderr_text);
// Whether pid runs Python: /proc/PID/exe or argv0 named python*.
bool is_python(pid_t pid, const std::string& argv0);

}  // namespace dlaunch::agent
