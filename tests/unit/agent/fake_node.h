// The agent as its node services (agent/service.h) see it, for testing a
// service alone: what it sends to the head is kept, its folder and whether
// its workers run (and which) are the test's to set.
#pragma once

#include <string>
#include <variant>
#include <vector>

#include "../seams/messages_of.h"
#include "service.h"

namespace dltest {

class FakeNode final : public dlaunch::agent::NodeAccess {
 public:
  void send_to_head(dlaunch::proto::Message msg) override { sent.push_back(std::move(msg)); }
  const std::string& node_dir() const override { return dir; }
  bool workers_running() const override { return running; }
  std::vector<RunningWorker> running_workers() const override { return workers; }
  bool worker_running(int rank) const override {
    for (const auto& w : workers) {
      if (w.rank == rank) return true;
    }
    return false;
  }
  bool workers_contained() const override { return contained; }
  void remove_on_death(const std::string& path) override { guarded.push_back(path); }

  template <typename T>
  std::vector<T> sent_of() const {
    return messages_of<T>(sent);
  }

  std::vector<dlaunch::proto::Message> sent;
  std::string dir;
  bool running = false;
  std::vector<RunningWorker> workers;  // running now
  bool contained = false;
  std::vector<std::string> guarded;  // what remove_on_death was given
};

}  // namespace dltest
