// --stdin on the agent as a node service (agent/stdin_service.h), without an
// agent: the pipe a reading worker gets at spawn, the head's data into it,
// acknowledged as far as every reader took it, what does not fit waiting
// for room without blocking, EOF, and a worker that is gone. Real pipes on
// the test's io_context.
#include "stdin_service.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "fake_node.h"

namespace {

namespace proto = dlaunch::proto;
using dlaunch::UniqueFd;
using dlaunch::agent::NodeService;
using dlaunch::agent::StdinService;

// All a non-blocking read of `fd` gets now ("" when nothing; "<EOF>" at its end).
std::string read_now(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      out.append(buf, static_cast<std::size_t>(n));
    } else {
      if (n == 0) out += "<EOF>";
      return out;
    }
  }
}

std::uint64_t last_ack(const dltest::FakeNode& node) {
  const auto acks = node.sent_of<proto::StdinAck>();
  return acks.empty() ? 0 : acks.back().bytes;
}

class StdinServiceTest : public ::testing::Test {
 protected:
  // Ranks 0 and 2 read stdin, rank 1 does not; each spawned.
  void spawn_all(bool spawn_two = true) {
    proto::Setup setup;
    setup.workers = {{.rank = 0, .stdin_pipe = true}, {.rank = 1}, {.rank = 2, .stdin_pipe = true}};
    proto::Ready ready;
    ASSERT_EQ(service_.prepare(setup, ready), std::nullopt);
    for (int rank = 0; rank < 3; ++rank) {
      NodeService::WorkerGift gift;
      service_.before_spawn(rank, gift);
      if (rank == 1) {
        EXPECT_FALSE(gift.stdin_read);  // /dev/null
      } else {
        ASSERT_TRUE(gift.stdin_read);
        readers_[rank] = std::move(gift.stdin_read);
      }
      service_.after_spawn(rank, rank != 2 || spawn_two);
    }
  }
  void run() { io_.poll(); }

  boost::asio::io_context io_;
  dltest::FakeNode node_;
  StdinService service_{io_, node_};
  std::map<int, UniqueFd> readers_;
};

TEST_F(StdinServiceTest, EveryReaderGetsTheDataAndEofAndTheHeadItsAck) {
  spawn_all();
  node_.running = true;
  ASSERT_TRUE(service_.handle(proto::Message{proto::StdinData{.data = "line one\n"}}));
  EXPECT_EQ(last_ack(node_), 9u);
  EXPECT_EQ(read_now(readers_[0].get()), "line one\n");
  EXPECT_EQ(read_now(readers_[2].get()), "line one\n");
  ASSERT_TRUE(service_.handle(proto::Message{proto::StdinEof{}}));
  EXPECT_EQ(read_now(readers_[0].get()), "<EOF>");
  EXPECT_EQ(read_now(readers_[2].get()), "<EOF>");
  EXPECT_FALSE(service_.handle(proto::Message{proto::Heartbeat{}}));
}

TEST_F(StdinServiceTest, WhatAFullPipeCannotTakeWaitsAndIsAcknowledgedOnceTaken) {
  spawn_all();
  const std::string big(256 * 1024, 'x');  // four times a pipe's 64 KiB
  ASSERT_TRUE(service_.handle(proto::Message{proto::StdinData{.data = big}}));
  const std::uint64_t first = last_ack(node_);
  EXPECT_LT(first, big.size());  // the pipes took what fits; the loop never blocked
  std::string got0, got2;
  for (int i = 0; i < 100 && (got0.size() < big.size() || got2.size() < big.size()); ++i) {
    got0 += read_now(readers_[0].get());
    got2 += read_now(readers_[2].get());
    run();
  }
  EXPECT_EQ(got0, big);
  EXPECT_EQ(got2, big);
  EXPECT_EQ(last_ack(node_), big.size());
}

TEST_F(StdinServiceTest, AReaderThatIsGoneTakesEverythingFromThenOn) {
  spawn_all();
  const std::string big(256 * 1024, 'y');
  ASSERT_TRUE(service_.handle(proto::Message{proto::StdinData{.data = big}}));
  // Rank 2 is held up; rank 0 reads all of it, then rank 2 exits.
  std::string got0;
  for (int i = 0; i < 100 && got0.size() < big.size(); ++i) {
    got0 += read_now(readers_[0].get());
    run();
  }
  EXPECT_LT(last_ack(node_), big.size());
  service_.on_worker_exit(2);  // what it did not read is dropped
  EXPECT_EQ(last_ack(node_), big.size());
}

TEST_F(StdinServiceTest, AWorkerThatCouldNotBeSpawnedHasNoPipe) {
  spawn_all(/*spawn_two=*/false);
  ASSERT_TRUE(service_.handle(proto::Message{proto::StdinData{.data = "abc"}}));
  EXPECT_EQ(last_ack(node_), 3u);  // rank 0 took it; rank 2 never ran
  EXPECT_EQ(read_now(readers_[0].get()), "abc");
  // Rank 2's read end was the gift's: with the service's end gone, it is at EOF.
  EXPECT_EQ(read_now(readers_[2].get()), "<EOF>");
}

}  // namespace
