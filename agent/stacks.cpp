#include "stacks.h"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <system_error>

#include <boost/asio/post.hpp>

#include "dlaunch/process.h"
#include "dlaunch/proto/channel.h"

namespace dlaunch::agent {

namespace asio = boost::asio;
using std::chrono::milliseconds;

namespace {

std::string basename_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string fmt_ms_error(const std::string& tool, milliseconds limit) {
  return tool + " did not finish within " + std::to_string(limit.count()) + " ms";
}

}  // namespace

StacksService::Run::~Run() {
  // A tool still at work is ours to end (it is our child; its exit is reaped
  // with the others').
  for (auto& it : items) {
    if (it.started && !it.done && it.tool_pid > 0 && os != nullptr)
      os->signal(it.tool_pid, SIGKILL);
  }
}

std::vector<std::string> stack_tool_argv(const std::string& tool, const std::string& path,
                                         pid_t pid) {
  if (tool == "gdb") {
    // Its default sysroot, "target:", reads the process's files in its own
    // mount namespace (a container's image).
    return {path,
            "-p",
            std::to_string(pid),
            "-batch",
            "-nx",
            "-ex",
            "set pagination off",
            "-ex",
            "thread apply all bt"};
  }
  return {path, "-p", std::to_string(pid)};
}

bool has_frames(std::string_view text) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    const auto nl = text.find('\n', pos);
    const auto line = text.substr(pos, nl == std::string_view::npos ? text.npos : nl - pos);
    if (line.size() > 1 && line[0] == '#' && line[1] >= '0' && line[1] <= '9') return true;
    if (nl == std::string_view::npos) break;
    pos = nl + 1;
  }
  return false;
}

std::string stack_tool_error(const std::string& tool, std::string_view text) {
  std::string line;
  std::size_t pos = 0;
  while (pos < text.size() && line.empty()) {
    const auto nl = text.find('\n', pos);
    auto l = text.substr(pos, nl == std::string_view::npos ? text.npos : nl - pos);
    while (!l.empty() && (l.back() == ' ' || l.back() == '\r')) l.remove_suffix(1);
    // gdb's start-up chatter comes before its error
    if (!l.empty() && l.find("warning") == std::string_view::npos) line = std::string(l);
    if (nl == std::string_view::npos) break;
    pos = nl + 1;
  }
  if (line.empty()) line = "no stack in its output";
  std::string out = tool + ": " + line.substr(0, 300);
  if (text.find("not permitted") != std::string_view::npos) {
    out +=
        " (ptrace refused: kernel.yama.ptrace_scope above 1, or a container without ptrace; "
        "docker needs --cap-add SYS_PTRACE)";
  }
  return out;
}

std::string python_dump(std::string_view text) {
  auto at = text.find("Fatal Python error");
  if (at == std::string_view::npos) at = text.find("Current thread 0x");
  if (at == std::string_view::npos) at = text.find("Thread 0x");
  if (at == std::string_view::npos) return {};
  const auto line_start = text.rfind('\n', at);
  return std::string(text.substr(line_start == std::string_view::npos ? 0 : line_start + 1));
}

bool is_python(pid_t pid, const std::string& argv0) {
  if (basename_of(argv0).starts_with("python")) return true;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/exe", ec);
  return !ec && exe.filename().string().starts_with("python");
}

StacksService::~StacksService() = default;

bool StacksService::handle(const proto::Message& msg) {
  const auto* m = std::get_if<proto::CollectStacks>(&msg);
  if (m == nullptr) return false;
  collect(*m);
  return true;
}

void StacksService::collect(const proto::CollectStacks& m) {
  if (run_) finish();  // a new request ends the one in progress
  auto run = std::make_unique<Run>();
  run->id = ++runs_;
  run->os = &os_;
  run->request = m;
  const auto env = current_environment();
  run->contained = node_.workers_contained();
  const auto tools = run->contained ? std::array<const char*, 2>{"gdb", "eu-stack"}
                                    : std::array<const char*, 2>{"eu-stack", "gdb"};
  for (const char* t : tools) {
    run->tool_path = find_program(t, env, "");
    if (!run->tool_path.empty()) {
      run->tool = t;
      break;
    }
  }
  for (const auto& w : node_.running_workers()) {
    if (w.pid <= 0) continue;
    Run::Item item;
    item.out.rank = w.rank;
    item.out.pid = w.pid;
    item.python = m.python_abort && is_python(w.pid, w.program);
    if (item.python) {
      // Still from here on: see stacks.h. The stack tools take a stopped
      // process as it is and leave it stopped.
      const rlimit no_core{0, 0};
      ::prlimit(w.pid, RLIMIT_CORE, &no_core, nullptr);
      os_.signal(w.pid, SIGSTOP);
      item.frozen = true;
    }
    if (run->tool.empty()) {
      item.done = true;
      item.out.error = "no stack tool (eu-stack or gdb) on this node";
    }
    run->items.push_back(std::move(item));
  }
  // One frame carries every rank's stacks: each gets its share.
  if (!run->items.empty()) {
    run->byte_limit =
        std::min(proto::kMaxStackBytes, (proto::kMaxFrameBytes / 2) / (2 * run->items.size()));
  }
  const milliseconds total(m.timeout_ms > 0 ? m.timeout_ms : 10000);
  // Leave time for the Python phase and for the answer to travel.
  run->tool_limit = std::max(milliseconds(500), total / 2);
  run->deadline = clock_.make_timer();
  run->python_wait = clock_.make_timer();
  const auto id = run->id;
  clock_.after(*run->deadline, total - std::min(total / 5, milliseconds(1000)), [this, id] {
    if (run_ && run_->id == id) finish();
  });
  run_ = std::move(run);
  if (run_->tool.empty()) {
    run_->next = run_->items.size();
    python_phase();
    return;
  }
  next();
}

void StacksService::next() {
  auto& run = *run_;
  while (run.running < kParallelTools && run.next < run.items.size()) {
    const std::size_t i = run.next++;
    auto& item = run.items[i];
    SpawnOptions opts;
    opts.argv = stack_tool_argv(run.tool, run.tool_path, item.out.pid);
    opts.env = current_environment();
    opts.env.emplace_back("LC_ALL=C");
    opts.parent_death_signal = SIGKILL;
    UniqueFd read_end;
    try {
      auto [r, w] = make_pipe();
      opts.stdout_fd = w.get();
      opts.stderr_fd = w.get();
      auto spawned = os_.spawn(opts);
      if (!spawned) {
        item.done = true;
        item.out.error = run.tool + " could not be started: " + spawned.error();
        continue;
      }
      item.tool_pid = *spawned;
      read_end = std::move(r);
    } catch (const std::system_error& e) {
      item.done = true;
      item.out.error = std::string("no pipe for the stack tool: ") + e.what();
      continue;
    }
    set_nonblocking(read_end.get(), true);
    item.pipe = std::make_unique<asio::posix::stream_descriptor>(io_, read_end.release());
    item.limit = clock_.make_timer();
    item.started = true;
    ++run.running;
    const auto id = run.id;
    clock_.after(*item.limit, run.tool_limit, [this, id, i] {
      if (!run_ || run_->id != id || run_->items[i].done) return;
      os_.signal(run_->items[i].tool_pid, SIGKILL);
      tool_done(i, fmt_ms_error(run_->tool, run_->tool_limit));
    });
    read(i);
  }
  if (run.next >= run.items.size() && run.running == 0) python_phase();
}

void StacksService::read(std::size_t i) {
  const auto id = run_->id;
  run_->items[i].pipe->async_wait(
      asio::posix::stream_descriptor::wait_read, [this, id, i](boost::system::error_code ec) {
        if (ec == asio::error::operation_aborted || !run_ || run_->id != id) return;
        auto& item = run_->items[i];
        if (item.done) return;
        const std::span<char> buf = proto::thread_read_buffer();
        const ssize_t n = ec ? -1 : ::read(item.pipe->native_handle(), buf.data(), buf.size());
        if (n > 0) {
          auto& text = item.out.native;
          if (text.size() < run_->byte_limit) {
            text.append(buf.data(),
                        std::min(static_cast<std::size_t>(n), run_->byte_limit - text.size()));
          }
        } else if (n == 0 || ec || (errno != EAGAIN && errno != EINTR)) {
          tool_done(i, {});
          return;
        }
        read(i);
      });
}

void StacksService::tool_done(std::size_t i, const std::string& error) {
  auto& run = *run_;
  auto& item = run.items[i];
  item.done = true;
  if (item.limit) item.limit->cancel();
  if (item.pipe) {
    boost::system::error_code ignored;
    item.pipe->close(ignored);
  }
  if (!error.empty()) {
    item.out.error = error;
  } else if (!has_frames(item.out.native)) {
    item.out.error = stack_tool_error(run.tool, item.out.native);
    item.out.native.clear();
  } else if (run.contained && run.tool == "eu-stack") {
    item.out.error = kHostFilesNote;
  }
  if (run.running > 0) --run.running;
  // Later, not from inside this handler: next() may end the run.
  const auto id = run.id;
  asio::post(io_, [this, id] {
    if (run_ && run_->id == id && !run_->python_phase) next();
  });
}

// Native stacks are in. Python ranks, when asked: SIGABRT, and keep their
// stderr until they exit (faulthandler writes its dump, then dies).
void StacksService::python_phase() {
  auto& run = *run_;
  if (run.python_phase) return;
  run.python_phase = true;
  bool waiting = false;
  for (std::size_t i = 0; i < run.items.size(); ++i) {
    auto& item = run.items[i];
    if (!item.python) continue;
    if (!node_.worker_running(item.out.rank)) continue;
    item.aborted = true;
    waiting = true;
    // To the main thread: faulthandler then dumps it as the current thread
    // (where the rank hung); a process-directed signal to a stopped process
    // goes to whichever thread wakes first (gloo's, CUDA's, ...).
    os_.signal_main_thread(item.out.pid, SIGABRT);
    thaw(i);  // the SIGABRT is handled first
  }
  if (!waiting) {
    finish();
    return;
  }
  const auto id = run.id;
  clock_.after(*run.python_wait, kPythonWait, [this, id] {
    if (run_ && run_->id == id) finish();
  });
}

void StacksService::on_output(int rank, proto::Stream stream, std::string_view data) {
  if (!run_ || stream != proto::Stream::kStderr || !run_->python_phase) return;
  for (auto& item : run_->items) {
    if (item.out.rank != rank || !item.aborted) continue;
    // Keep the end: faulthandler's dump is the last thing it writes.
    item.out.python.append(data);
    const std::size_t cap = run_->byte_limit * 2;
    if (item.out.python.size() > cap) item.out.python.erase(0, item.out.python.size() - cap);
  }
}

void StacksService::on_worker_exit(int rank) {
  if (!run_ || !run_->python_phase) return;
  bool all = true;
  for (auto& item : run_->items) {
    if (item.out.rank == rank) item.exited = true;
    if (item.aborted && !item.exited) all = false;
  }
  if (all) {
    const auto id = run_->id;
    asio::post(io_, [this, id] {
      if (run_ && run_->id == id) finish();
    });
  }
}

void StacksService::thaw(std::size_t i) {
  auto& item = run_->items[i];
  if (!item.frozen) return;
  item.frozen = false;
  if (node_.worker_running(item.out.rank)) os_.signal(item.out.pid, SIGCONT);
}

// Answers with what there is and ends the run.
void StacksService::finish() {
  for (std::size_t i = 0; i < run_->items.size(); ++i) thaw(i);
  std::unique_ptr<Run> run = std::move(run_);
  proto::Stacks out{.request_id = run->request.request_id, .tool = run->tool};
  for (auto& item : run->items) {
    if (!item.done && item.started) {
      item.out.error = fmt_ms_error(run->tool, run->tool_limit);
    } else if (!item.done) {
      item.out.error = "not reached before the time limit";
    }
    if (item.aborted) {
      item.out.python = python_dump(item.out.python);
      if (item.out.python.size() > run->byte_limit) {
        item.out.python.erase(0, item.out.python.size() - run->byte_limit);
      }
    } else {
      item.out.python.clear();
    }
    out.ranks.push_back(std::move(item.out));
  }
  node_.send_to_head(std::move(out));
  // Its handlers may be on the stack: let it go once they are done.
  asio::post(io_, [r = std::shared_ptr<Run>(std::move(run))] {});
}

}  // namespace dlaunch::agent
