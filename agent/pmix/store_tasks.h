// StoreTasks: the PMIx requests that the job's store serves (published
// names, connect/disconnect) make blocking store calls (a lookup may wait
// for a name); each runs on a thread of its own with a connection of its own
// (comm::Store serialises calls on one connection, so a parked lookup would
// hold up the rest), and hands its answer back to the agent's loop.
//
// States: unconfigured (no store known yet: a task is answered at once with
// the reason) -> configured (Start gave the store's address) -> stopped
// (every running task's client is closed, which fails its call, a connect
// included, at once, and its thread joined; no answer reaches the loop after
// stop()).
//
// Threads: configure/run/stop on the loop's thread; the work runs on its own
// thread; the answer it returns is posted to the loop.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>

#include "comm/store.h"

namespace dlaunch::agent {

class StoreTasks {
 public:
  // Runs on the loop after the work: the answer to PMIx.
  using Answer = std::function<void()>;
  // The work: store is the task's connection, or null when there is none
  // (then error says why). Throws nothing; returns the answer.
  using Work = std::function<Answer(comm::Store* store, const std::string& error)>;

  explicit StoreTasks(boost::asio::io_context& io);
  ~StoreTasks();  // stop()
  StoreTasks(const StoreTasks&) = delete;
  StoreTasks& operator=(const StoreTasks&) = delete;

  void configure(comm::StoreOptions opts);
  bool configured() const;
  void run(Work work);
  void stop();

  struct State;

 private:
  boost::asio::io_context& io_;
  std::shared_ptr<State> state_;
};

}  // namespace dlaunch::agent
