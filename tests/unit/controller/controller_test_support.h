// A Controller with nothing real under it: links that are no processes (the
// test plays every agent by delivering messages and reading what the
// controller sent) and a clock the test moves. Every test runs in
// microseconds.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "../seams/manual_clock.h"
#include "../seams/messages_of.h"
#include "controller/controller.h"
#include "dlaunch/version.h"
#include "hostfile/hostfile.h"
#include "output/output_sink.h"
#include "plan/plan.h"

namespace dltest {

namespace proto = dlaunch::proto;

// One agent's link, played by the test.
class FakeLink final : public dlaunch::AgentLink {
 public:
  explicit FakeLink(dlaunch::LinkCallbacks cb) : cb_(std::move(cb)) {}
  void send(const proto::Message& msg) override {
    if (!open_) throw std::logic_error("send on a closed link");
    sent.push_back(msg);
  }
  bool is_open() const override { return open_; }
  void close() override { open_ = false; }
  void read_pending() override {
    ++read_pending_calls;
    if (on_read_pending) on_read_pending();
  }
  void kill_agent() override { killed = true; }
  bool agent_gone() const override { return !open_; }
  void reap() override {}
  std::string peer_address() const override { return peer; }
  dlaunch::LinkStart start_info() const override { return start; }
  std::optional<dlaunch::AgentWork> agent_work() const override { return work; }

  // The agent says something.
  void deliver(proto::Message msg) { cb_.on_message(std::move(msg)); }
  // The connection ends (EOF, reset, the agent died).
  void drop(const std::string& reason) {
    open_ = false;
    cb_.on_close(reason);
  }
  // The messages of one kind the controller sent, oldest first.
  template <typename T>
  std::vector<T> sent_of() const {
    return messages_of<T>(sent);
  }

  std::vector<proto::Message> sent;
  std::string peer;          // the node's address as the head reached it
  dlaunch::LinkStart start;  // how its start went (queued: waiting its turn to connect)
  // A local agent's process as the kernel sees it (none: a remote agent).
  std::optional<dlaunch::AgentWork> work;
  bool killed = false;
  int read_pending_calls = 0;
  std::function<void()> on_read_pending;

 private:
  dlaunch::LinkCallbacks cb_;
  bool open_ = true;
};

class FakeLinks final : public dlaunch::LinkFactory {
 public:
  std::unique_ptr<dlaunch::AgentLink> start(const dlaunch::NodePlan& node, const std::string&,
                                            const std::string&,
                                            dlaunch::LinkCallbacks cb) override {
    if (node.node_rank == refuse_node) throw std::runtime_error("cannot start it");
    auto link = std::make_unique<FakeLink>(std::move(cb));
    links.push_back(link.get());
    return link;
  }
  std::vector<FakeLink*> links;  // by node; owned by the controller
  int refuse_node = -1;
};

// A job of `nodes` nodes x `per_node` ranks under a controller on fakes.
class ControllerTest : public ::testing::Test {
 protected:
  void make(int nodes, int per_node, dlaunch::ControllerConfig cfg = {}) {
    links_.links.clear();
    reported_.clear();
    std::string hosts;
    for (int i = 0; i < nodes; ++i)
      hosts +=
          (i ? "," : "") + std::string("host") + std::to_string(i) + ":" + std::to_string(per_node);
    dlaunch::PlanOptions po;
    po.job_id = "t";
    po.command = {"prog"};
    plan_ = dlaunch::make_plan(dlaunch::parse_hosts_argument(hosts), po);
    null_fd_ = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    sink_.emplace(dlaunch::OutputSink::Config{
        .job_id = "t",
        .node_of_rank = std::vector<std::string>(static_cast<std::size_t>(plan_.world_size), "h"),
        .stdout_fd = null_fd_,
        .stderr_fd = null_fd_});
    cfg.agent_path = "dlaunch-agent";
    controller_ = std::make_unique<dlaunch::Controller>(
        plan_, cfg, *sink_,
        dlaunch::ControllerEnv{
            .io = io_, .links = links_, .clock = clock_, .observers = {observer_}});
  }
  void TearDown() override {
    controller_.reset();
    if (null_fd_ >= 0) ::close(null_fd_);
    null_fd_ = -1;
  }

  FakeLink& link(std::size_t node) { return *links_.links.at(node); }
  std::size_t nodes() const { return plan_.nodes.size(); }

  // Every agent says Hello and Ready: the controller sends Start.
  void start_job() {
    controller_->start();
    for (std::size_t i = 0; i < nodes(); ++i) {
      link(i).deliver(proto::Hello{.agent_version = dlaunch::kVersion, .hostname = "h"});
    }
    for (std::size_t i = 0; i < nodes(); ++i) {
      ASSERT_EQ(link(i).sent_of<proto::Setup>().size(), 1u) << "node " << i;
      link(i).deliver(proto::Ready{.master_port = 29500, .store_port = 29400});
    }
    for (std::size_t i = 0; i < nodes(); ++i) {
      ASSERT_EQ(link(i).sent_of<proto::Start>().size(), 1u) << "node " << i;
      for (const auto& r : plan_.nodes[i].ranks)
        link(i).deliver(proto::Started{.rank = r.rank, .pid = 1000 + r.rank});
    }
  }
  // Node i reports that rank `rank` exited with `code` (or by `signal`).
  void exited(int rank, int code, int signal = 0) {
    const std::size_t node = node_of(rank);
    reported_.insert(rank);
    proto::Exited ex{.rank = rank, .pid = 1000 + rank, .code = code};
    if (signal != 0) {
      ex.kind = proto::ExitKind::kSignaled;
      ex.signal = signal;
    }
    link(node).deliver(ex);
  }
  // What a well-behaved agent does after Abort/Shutdown: its running ranks
  // exit (SIGTERM), then Done and EOF.
  void agents_stop_everything(int signal = 15) {
    for (std::size_t i = 0; i < nodes(); ++i) {
      if (!link(i).is_open()) continue;
      for (const auto& r : plan_.nodes[i].ranks) {
        if (!reported_.count(r.rank)) exited(r.rank, 0, signal);
      }
    }
    for (std::size_t i = 0; i < nodes(); ++i) {
      if (!link(i).is_open()) continue;
      link(i).deliver(proto::Done{});
      link(i).drop("EOF");
    }
  }
  std::size_t node_of(int rank) const {
    for (std::size_t i = 0; i < plan_.nodes.size(); ++i) {
      for (const auto& r : plan_.nodes[i].ranks)
        if (r.rank == rank) return i;
    }
    throw std::logic_error("no such rank");
  }

  boost::asio::io_context io_;
  ManualClock clock_;
  FakeLinks links_;
  dlaunch::JobPlan plan_;
  std::optional<dlaunch::OutputSink> sink_;
  std::unique_ptr<dlaunch::Controller> controller_;
  std::set<int> reported_;
  int null_fd_ = -1;
  dlaunch::JobObserver* observer_ = nullptr;  // beside the console, when a test sets one
};

}  // namespace dltest
