#include "pmix/store_tasks.h"

#include <list>
#include <optional>
#include <thread>
#include <utility>

#include <boost/asio/post.hpp>

#include "dlaunch/thread_annotations.h"

namespace dlaunch::agent {

namespace asio = boost::asio;

struct StoreTasks::State {
  Mutex mu;
  bool stopped GUARDED_BY(mu) = false;
  std::optional<comm::StoreOptions> opts GUARDED_BY(mu);
  // Clients of running tasks, closed on stop().
  std::list<comm::Store*> live GUARDED_BY(mu);
  // Threads, joined when done (on the next run()) or on stop().
  struct Task {
    std::thread thread;
    bool done = false;
  };
  std::list<Task> tasks GUARDED_BY(mu);
};

StoreTasks::StoreTasks(asio::io_context& io) : io_(io), state_(std::make_shared<State>()) {}

StoreTasks::~StoreTasks() { stop(); }

void StoreTasks::configure(comm::StoreOptions opts) {
  MutexLock lock(state_->mu);
  state_->opts = std::move(opts);
}

bool StoreTasks::configured() const {
  MutexLock lock(state_->mu);
  return state_->opts.has_value();
}

void StoreTasks::run(Work work) {
  std::list<std::thread> finished;  // joined below, outside the lock
  {
    MutexLock lock(state_->mu);
    if (state_->stopped) return;
    for (auto it = state_->tasks.begin(); it != state_->tasks.end();) {
      if (it->done) {
        finished.push_back(std::move(it->thread));
        it = state_->tasks.erase(it);
      } else {
        ++it;
      }
    }
    auto& task = state_->tasks.emplace_back();
    State::Task* self = &task;
    task.thread = std::thread([state = state_, self, work = std::move(work), &io = io_] {
      std::optional<comm::StoreOptions> opts;
      {
        MutexLock l(state->mu);
        opts = state->opts;
      }
      Answer answer;
      if (!opts) {
        answer = work(nullptr, "the job's store is not known yet");
      } else {
        std::optional<comm::Store> store;
        std::string error;
        // Connected below, once stop() can see it: a stop() meanwhile ends
        // the connect at once (close()), as it ends any other wait.
        opts->connect_at_construction = false;
        try {
          store.emplace(*opts);
        } catch (const std::exception& e) {
          error = e.what();
        }
        bool stopped = false;
        if (store) {
          MutexLock l(state->mu);
          stopped = state->stopped;
          if (!stopped) state->live.push_back(&*store);
        }
        if (!stopped) {
          bool connected = false;
          if (store) {
            try {
              store->connect();
              connected = true;
            } catch (const std::exception& e) {
              error = e.what();
            }
          }
          answer = work(connected ? &*store : nullptr, error);
          if (store) {
            MutexLock l(state->mu);
            state->live.remove(&*store);
          }
        }
      }
      MutexLock l(state->mu);
      self->done = true;
      if (!state->stopped && answer) asio::post(io, std::move(answer));
    });
  }
  for (auto& t : finished) t.join();
}

void StoreTasks::stop() {
  std::list<State::Task> tasks;
  {
    MutexLock lock(state_->mu);
    if (state_->stopped) return;
    state_->stopped = true;
    for (comm::Store* s : state_->live) s->close();
    tasks.swap(state_->tasks);
  }
  for (auto& t : tasks) {
    if (t.thread.joinable()) t.thread.join();
  }
}

}  // namespace dlaunch::agent
