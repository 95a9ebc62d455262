// StoreTasks (agent/pmix/store_tasks.h): the PMIx server's blocking store
// calls on threads of their own, each with its own authenticated connection,
// answers on the loop, and a stop that interrupts a waiting call at once.
#include "pmix/store_tasks.h"

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "comm/store.h"

using dlaunch::agent::StoreTasks;
namespace comm = dlaunch::comm;
using namespace std::chrono_literals;

namespace {

comm::StoreOptions options(const comm::ThreadedStoreServer& server, const std::string& secret) {
  comm::StoreOptions o;
  o.host = "127.0.0.1";
  o.port = server.port();
  o.secret = secret;
  o.connect_timeout = 2s;
  return o;
}

// Runs the loop until `done` or the deadline; true if done.
bool run_until(boost::asio::io_context& io, const std::atomic<bool>& done,
               std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!done && std::chrono::steady_clock::now() < until) {
    io.restart();
    io.run_for(20ms);
  }
  return done;
}

}  // namespace

TEST(StoreTasks, WithoutAStoreTheWorkHearsWhyAtOnce) {
  boost::asio::io_context io;
  StoreTasks tasks(io);
  std::atomic<bool> answered{false};
  std::string why;
  tasks.run([&](comm::Store* store, const std::string& error) -> StoreTasks::Answer {
    EXPECT_EQ(store, nullptr);
    why = error;
    return [&] { answered = true; };
  });
  ASSERT_TRUE(run_until(io, answered, 5s));
  EXPECT_EQ(why, "the job's store is not known yet");
}

TEST(StoreTasks, EachTaskHasAnAuthenticatedConnectionAndAnswersOnTheLoop) {
  comm::ThreadedStoreServer server({.bind_address = "127.0.0.1", .secret = "s3cret"});
  boost::asio::io_context io;
  StoreTasks tasks(io);
  tasks.configure(options(server, "s3cret"));
  std::atomic<bool> answered{false};
  tasks.run([&](comm::Store* store, const std::string& error) -> StoreTasks::Answer {
    EXPECT_TRUE(error.empty()) << error;
    if (store != nullptr) store->set("pmix/names/session/x", "v");
    return [&] { answered = true; };
  });
  ASSERT_TRUE(run_until(io, answered, 10s));
  EXPECT_EQ(server.peek({"pmix/names/session/x"}).at(0), std::optional<std::string>("v"));
}

TEST(StoreTasks, AStoreWithAnotherSecretIsAnErrorNotAConnection) {
  comm::ThreadedStoreServer server({.bind_address = "127.0.0.1", .secret = "theirs"});
  boost::asio::io_context io;
  StoreTasks tasks(io);
  tasks.configure(options(server, "ours"));
  std::atomic<bool> answered{false};
  std::string why;
  tasks.run([&](comm::Store* store, const std::string& error) -> StoreTasks::Answer {
    EXPECT_EQ(store, nullptr);
    why = error;
    return [&] { answered = true; };
  });
  ASSERT_TRUE(run_until(io, answered, 10s));
  EXPECT_FALSE(why.empty());
}

// A lookup waiting for a name that never comes must not hold the agent when
// the job ends: stop() interrupts it at once, and its answer never reaches
// the loop (PMIx is gone by then).
TEST(StoreTasks, StopInterruptsAWaitingTaskAndDropsItsAnswer) {
  comm::ThreadedStoreServer server({.bind_address = "127.0.0.1", .secret = "s3cret"});
  boost::asio::io_context io;
  StoreTasks tasks(io);
  tasks.configure(options(server, "s3cret"));
  std::atomic<bool> waiting{false}, answered{false}, interrupted{false};
  tasks.run([&](comm::Store* store, const std::string&) -> StoreTasks::Answer {
    waiting = true;
    try {
      if (store != nullptr) store->get("never", 60s);
    } catch (const comm::StoreError&) {
      interrupted = true;
    }
    return [&] { answered = true; };
  });
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (!waiting && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(waiting);
  std::this_thread::sleep_for(100ms);  // parked in get()
  const auto t0 = std::chrono::steady_clock::now();
  tasks.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_TRUE(interrupted);
  io.restart();
  io.poll();
  EXPECT_FALSE(answered);
  // After stop(), work is not run at all.
  bool ran = false;
  tasks.run([&](comm::Store*, const std::string&) -> StoreTasks::Answer {
    ran = true;
    return nullptr;
  });
  EXPECT_FALSE(ran);
}

// A task whose store is not there yet retries its connect for
// connect_timeout; the job's end must not wait for that: stop() ends the
// connect at once (before, the connect was made before stop() could reach
// it, and stop() waited out its minute).
TEST(StoreTasks, StopEndsATaskWhoseConnectWaitsForTheStore) {
  comm::StoreOptions o;
  o.host = "127.0.0.1";
  o.port = 1;  // nothing listens there
  o.secret = "s3cret";
  o.connect_timeout = 60s;
  boost::asio::io_context io;
  StoreTasks tasks(io);
  tasks.configure(o);
  std::atomic<bool> ran{false};
  tasks.run([&](comm::Store*, const std::string&) -> StoreTasks::Answer {
    ran = true;
    return nullptr;
  });
  std::this_thread::sleep_for(300ms);  // retrying
  const auto t0 = std::chrono::steady_clock::now();
  tasks.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  EXPECT_TRUE(ran) << "the work hears that there is no store";
}
