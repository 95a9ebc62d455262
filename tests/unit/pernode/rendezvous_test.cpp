// The per-node rendezvous (launcher/pernode/rendezvous.h) with its store in
// memory (tests/unit/seams/memory_store.h): several launchers of one job as
// Rendezvous objects in this process, no socket, no other process, no
// thread. Their joins, watches and exit barriers all run on the test's one
// loop and manual clock, so that a join timeout, a last call, a heartbeat
// timeout or a lost launcher's second takes no real time.
// What the launchers agree on (node ranks, MASTER_ADDR/PORT, who hosts), when
// a round closes (MAX, MIN and the last call, never without MIN), who is late,
// lost or silent, which failure is the job's, the exit barrier, the host's
// successor, and what is refused (a wrong secret, two launchers disagreeing).
// The integration suites (pernode_tests, rdzv_security_tests) run the same
// paths over the real TCP store between real launcher processes.
#include "pernode/rendezvous.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "../seams/manual_clock.h"
#include "../seams/memory_store.h"
#include "dlaunch/error.h"
#include "hostfile/hostfile.h"

namespace dlaunch {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr std::uint16_t kPort = 29500;

// A launcher's settings as the per-node driver makes them, with timeouts a
// unit test can wait out. The heartbeat timeout is 5 s where a test does not
// set its own: these run under TSan on CI's two loaded cores, where a
// launcher's thread can miss 0.6 s of heartbeats and be taken for lost.
RdzvSettings launcher(const std::string& name, bool is_static, int min_nodes, int max_nodes) {
  RdzvSettings s;
  s.is_static = is_static;
  s.host = "127.0.0.1";
  s.port = kPort;
  s.run_id = "job";
  s.min_nodes = min_nodes;
  s.max_nodes = max_nodes;
  s.nproc = 2;
  s.secret = "the job's secret";
  s.me = name + " pid 1";
  s.join_timeout = milliseconds(3000);
  s.last_call = milliseconds(150);
  s.read_timeout = milliseconds(3000);
  s.close_timeout = milliseconds(3000);
  s.heartbeat_timeout = milliseconds(5000);
  return s;
}

RdzvSettings static_node(int rank, int nnodes) {
  RdzvSettings s = launcher("node" + std::to_string(rank), true, nnodes, nnodes);
  s.node_rank = rank;
  return s;
}

// A join or exit barrier under way on the test's loop, and what came of it.
struct Joining {
  bool done = false;
  std::exception_ptr error;
  Membership m;
  // The membership, or the join's error thrown.
  Membership get() const {
    if (error) std::rethrow_exception(error);
    return m;
  }
};
struct Barrier {
  bool done = false;
  std::optional<PeerFailure> failure;
};

struct Job {
  boost::asio::io_context io;
  dltest::ManualClock clock;
  dltest::MemoryStoreNetwork net;
  std::vector<std::unique_ptr<Rendezvous>> nodes;
  Job() { net.set_clock(clock); }
  Rendezvous& add(RdzvSettings s) {
    nodes.push_back(std::make_unique<Rendezvous>(std::move(s), net, io, clock));
    return *nodes.back();
  }
  std::vector<Rendezvous*> all() {
    std::vector<Rendezvous*> out;
    for (auto& n : nodes) out.push_back(n.get());
    return out;
  }
  void watch(Rendezvous& r) { r.start_watch(io, clock); }
  // Runs the loop until `done` says so: what is ready, then the clock to its
  // next deadline (at most `limit` of it).
  bool drive(const std::function<bool()>& done, Clock::duration limit = std::chrono::seconds(60)) {
    const auto until = clock.now() + limit;
    for (;;) {
      io.restart();
      io.poll();
      if (done()) return true;
      const auto next = clock.next_due();
      if (next == Clock::duration::max() || clock.now() + next > until) return false;
      clock.advance(next);
    }
  }
  // Lets `d` of the clock pass, running what falls due on the way.
  void pass(Clock::duration d) {
    const auto until = clock.now() + d;
    for (;;) {
      io.restart();
      io.poll();
      const auto next = clock.next_due();
      if (next == Clock::duration::max() || clock.now() + next > until) break;
      clock.advance(next);
    }
    clock.advance(until - clock.now());
    io.restart();
    io.poll();
  }
  std::shared_ptr<Joining> start_join(Rendezvous& r, int round = 0) {
    auto j = std::make_shared<Joining>();
    r.start_join(round, [j](std::exception_ptr e, const Membership& m) {
      j->done = true;
      j->error = std::move(e);
      j->m = m;
    });
    return j;
  }
  // Every launcher's join(round) started at once, all on the loop.
  std::vector<std::shared_ptr<Joining>> start_joins(const std::vector<Rendezvous*>& rs,
                                                    int round = 0) {
    std::vector<std::shared_ptr<Joining>> js;
    js.reserve(rs.size());
    for (Rendezvous* r : rs) js.push_back(start_join(*r, round));
    return js;
  }
  bool all_done(const std::vector<std::shared_ptr<Joining>>& js) {
    return std::all_of(js.begin(), js.end(), [](const auto& j) { return j->done; });
  }
  // Every launcher's join(round) at once; their memberships.
  std::vector<Membership> join_all(const std::vector<Rendezvous*>& rs, int round = 0) {
    const auto js = start_joins(rs, round);
    EXPECT_TRUE(drive([&] { return all_done(js); }));
    std::vector<Membership> out;
    out.reserve(js.size());
    for (const auto& j : js) out.push_back(j->get());
    return out;
  }
  std::shared_ptr<Barrier> start_barrier(Rendezvous& r) {
    auto b = std::make_shared<Barrier>();
    r.start_finish_succeeded([b](std::optional<PeerFailure> f) {
      b->done = true;
      b->failure = std::move(f);
    });
    return b;
  }
  // finish(last) of each of `rs`, at once, until all have finished.
  void finish_all(const std::vector<Rendezvous*>& rs, bool last) {
    int left = static_cast<int>(rs.size());
    for (Rendezvous* r : rs) r->start_finish(last, [&left] { --left; });
    EXPECT_TRUE(drive([&] { return left == 0; }));
  }
  // Every launcher's finish() at once, each launcher then exiting (its
  // connections close): the host's waits for the others to leave its
  // store, as it does between processes.
  void exit_all() {
    std::vector<Rendezvous*> rs;
    for (auto& n : nodes) {
      if (n) rs.push_back(n.get());
    }
    finish_all(rs, true);
    for (auto& n : nodes) n.reset();
  }
};

// Until the rendezvous has heard of a peer's failure, or 60 s of the clock.
std::optional<PeerFailure> await_peer(Job& job, Rendezvous& r) {
  (void)job.drive([&] { return r.peer_failure().has_value(); });
  return r.peer_failure();
}

TEST(Rendezvous, StaticNodesMeetWithTheirRanksAndNodeZerosMasterPort) {
  Job job;
  for (int k = 0; k < 3; ++k) job.add(static_node(k, 3));
  const auto ms = job.join_all(job.all());
  for (int k = 0; k < 3; ++k) {
    const Membership& m = ms[static_cast<std::size_t>(k)];
    EXPECT_EQ(m.nnodes, 3);
    EXPECT_EQ(m.node_rank, k);
    EXPECT_EQ(m.round, 0);
    EXPECT_EQ(m.master_addr, "127.0.0.1");
    // torchrun's: the static rendezvous's MASTER_PORT is --master-port.
    EXPECT_EQ(m.master_port, kPort);
    EXPECT_EQ(m.names, (std::vector<std::string>{"node0 pid 1", "node1 pid 1", "node2 pid 1"}));
    EXPECT_EQ(m.hosting, k == 0);
  }
  // The store moved to a port of its own and left the meeting port free for
  // rank 0 to bind as MASTER_PORT.
  EXPECT_NE(ms[0].store_port, kPort);
  EXPECT_EQ(ms[1].store_port, ms[0].store_port);
  EXPECT_FALSE(job.net.listens(kPort));
  EXPECT_TRUE(job.net.listens(ms[0].store_port));
}

// A job of one node with no port asked for (--standalone): its agent
// reserves a free MASTER_PORT itself (0 here), so no port found free by
// this launcher can be found free by another job before it is reserved
// (issue 34: two of 1024 concurrent jobs reserved one port). A port asked
// for stays the job's.
TEST(Rendezvous, AJobOfOneNodeLeavesMasterPortToItsAgentUnlessOneIsAskedFor) {
  Job alone;
  RdzvSettings s = static_node(0, 1);
  s.port = 0;  // --standalone: any free port to meet at
  alone.add(s);
  const auto m = alone.join_all(alone.all());
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].nnodes, 1);
  EXPECT_EQ(m[0].master_port, 0);
  EXPECT_EQ(m[0].master_addr, "127.0.0.1");
  Job asked;
  asked.add(static_node(0, 1));  // --master-port 29500
  EXPECT_EQ(asked.join_all(asked.all()).at(0).master_port, kPort);
}

TEST(Rendezvous, TwoLaunchersClaimingOneNodeRankAreRefused) {
  Job job;
  for (int k = 0; k < 2; ++k) {
    RdzvSettings s = static_node(k, 3);
    s.join_timeout = milliseconds(500);
    job.add(s);
  }
  RdzvSettings twin = static_node(1, 3);
  twin.me = "twin pid 2";
  job.add(twin);
  const auto js = job.start_joins(job.all());
  ASSERT_TRUE(job.drive([&] { return job.all_done(js); }));
  int refused = 0;
  for (const auto& j : js) {
    try {
      (void)j->get();
    } catch (const InputError& e) {
      ++refused;
      EXPECT_EQ(e.pos().source, "--node-rank");
      EXPECT_NE(e.message().find("node rank 1 is claimed by two launchers"), std::string::npos)
          << e.message();
    } catch (const Error& e) {
      // Node 0 waits for a node rank 2 that never comes.
      EXPECT_NE(std::string(e.what()).find("node rank(s) 2 did not join"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(refused, 1);
}

TEST(Rendezvous, ALauncherWithOtherSettingsIsRefusedNamingBoth) {
  Job job;
  RdzvSettings a = launcher("a", false, 2, 2);
  // Long enough that the first launcher is still there when the second reads
  // its settings: at 500 ms it gave up first once, under ASan and a loaded
  // CI machine, and the second then waited alone for its own join_timeout.
  a.join_timeout = milliseconds(3000);
  RdzvSettings b = launcher("b", false, 2, 2);
  b.nproc = 4;
  Rendezvous& ra = job.add(a);
  const auto first = job.start_join(ra);
  // The first launcher's settings are the job's.
  ASSERT_TRUE(job.drive([&] { return job.net.listens(kPort); }));
  const auto second = job.start_join(job.add(b));
  ASSERT_TRUE(job.drive([&] { return second->done; }));
  try {
    (void)second->get();
    ADD_FAILURE() << "joined with another --nproc-per-node";
  } catch (const InputError& e) {
    EXPECT_EQ(e.pos().source, "--nproc-per-node");
    EXPECT_NE(e.message().find("--nproc-per-node 4 here (b pid 1), --nproc-per-node 2 on the "
                               "launcher that came first (a pid 1)"),
              std::string::npos)
        << e.message();
  }
  // Nobody else comes: join_timeout.
  ASSERT_TRUE(job.drive([&] { return first->done; }));
  EXPECT_THROW((void)first->get(), Error);
}

TEST(Rendezvous, C10dClosesAtOnceWhenMaxHaveJoinedWithTheHostAsNodeZero) {
  Job job;
  for (const char* n : {"a", "b", "c"}) {
    RdzvSettings s = launcher(n, false, 1, 3);
    s.last_call = milliseconds(60'000);  // MAX closes it, not the last call
    job.add(s);
  }
  const auto start = job.clock.now();
  const auto ms = job.join_all(job.all());
  EXPECT_LT(job.clock.now() - start, milliseconds(5000));
  std::set<int> ranks;
  for (const Membership& m : ms) {
    EXPECT_EQ(m.nnodes, 3);
    ranks.insert(m.node_rank);
    EXPECT_EQ(m.hosting, m.node_rank == 0);
    EXPECT_EQ(m.master_addr, ms[0].master_addr);
    EXPECT_EQ(m.master_port, ms[0].master_port);
    EXPECT_EQ(m.names, ms[0].names);
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2}));
  EXPECT_EQ(job.net.stores_hosted(), 1);
}

TEST(Rendezvous, C10dWithMinNodesClosesAfterTheLastCall) {
  Job job;
  for (const char* n : {"a", "b"}) {
    RdzvSettings s = launcher(n, false, 2, 4);
    s.last_call = milliseconds(300);
    job.add(s);
  }
  const auto start = job.clock.now();
  const auto ms = job.join_all(job.all());
  const auto took = job.clock.now() - start;
  EXPECT_GE(took, milliseconds(300));  // MIN are here: the last call runs its course
  EXPECT_LT(took, milliseconds(3000));
  EXPECT_EQ(ms[0].nnodes, 2);
  EXPECT_EQ(ms[1].nnodes, 2);
  EXPECT_NE(ms[0].node_rank, ms[1].node_rank);
}

TEST(Rendezvous, C10dWithoutMinNodesFailsAtTheJoinTimeoutSayingHowManyCame) {
  Job job;
  RdzvSettings s = launcher("alone", false, 2, 2);
  s.join_timeout = milliseconds(300);
  const auto start = job.clock.now();
  const auto j = job.start_join(job.add(s));
  ASSERT_TRUE(job.drive([&] { return j->done; }));
  try {
    (void)j->get();
    ADD_FAILURE() << "closed without MIN nodes";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("did not close within 0.3 s (join_timeout): 1 of at "
                                         "least 2 node(s) joined"),
              std::string::npos)
        << e.what();
  }
  EXPECT_GE(job.clock.now() - start, milliseconds(300));
}

TEST(Rendezvous, AWrongSecretIsNeverJoinedAndTheJobWaitsForTheRealNode) {
  Job job;
  RdzvSettings n0 = static_node(0, 2);
  n0.join_timeout = milliseconds(500);
  RdzvSettings n1 = static_node(1, 2);
  n1.secret = "another secret";
  const auto host = job.start_join(job.add(n0));
  ASSERT_TRUE(job.drive([&] { return job.net.listens(kPort); }));
  const auto other = job.start_join(job.add(n1));
  ASSERT_TRUE(job.drive([&] { return other->done; }));
  try {
    (void)other->get();
    ADD_FAILURE() << "joined a store it cannot authenticate";
  } catch (const InputError& e) {
    EXPECT_NE(e.message().find("is held by something that is not this job's rendezvous"),
              std::string::npos)
        << e.message();
  }
  ASSERT_TRUE(job.drive([&] { return host->done; }));
  try {
    (void)host->get();
    ADD_FAILURE() << "node 0 met without node 1";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("node rank(s) 1 did not join"), std::string::npos)
        << e.what();
  }
}

TEST(Rendezvous, AFailurePublishedOnOneNodeIsEveryNodesAndTheFirstWins) {
  Job job;
  for (int k = 0; k < 3; ++k) job.add(static_node(k, 3));
  (void)job.join_all(job.all());
  for (auto& n : job.nodes) job.watch(*n);
  // Two nodes fail at the same instant (both said before the store has
  // answered either): one failure is the job's, everywhere.
  job.nodes[1]->publish_failure("rank 2 failed", 7, false);
  job.nodes[2]->publish_failure("rank 5 failed", 9, false);
  const auto a1 = job.nodes[1]->agreed_failure(milliseconds(3000));
  const auto a2 = job.nodes[2]->agreed_failure(milliseconds(3000));
  // Exactly one of the two was first; the other learns the winner's.
  ASSERT_NE(a1.has_value(), a2.has_value());
  const PeerFailure winner = a1 ? *a1 : *a2;
  EXPECT_TRUE(winner.message == "rank 2 failed" || winner.message == "rank 5 failed");
  EXPECT_EQ(winner.status, winner.message == "rank 2 failed" ? 7 : 9);
  const auto seen = await_peer(job, *job.nodes[0]);
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(seen->message, winner.message);
  EXPECT_EQ(seen->status, winner.status);
  EXPECT_FALSE(seen->final);
  job.exit_all();
}

// A driver is told of another node's failure the moment the watch sees it
// (on_peer_failure: no polling), and at once when it asks after the fact;
// cleared, it is told nothing more.
TEST(Rendezvous, APeersFailureIsToldTheMomentItIsSeen) {
  Job job;
  for (int k = 0; k < 2; ++k) job.add(static_node(k, 2));
  (void)job.join_all(job.all());
  std::promise<void> told;
  std::atomic<int> calls{0};
  job.nodes[0]->on_peer_failure([&] {
    if (calls.fetch_add(1) == 0) told.set_value();
  });
  for (auto& n : job.nodes) job.watch(*n);
  EXPECT_EQ(calls.load(), 0);
  job.nodes[1]->publish_failure("rank 1 failed", 3, false);
  (void)job.drive([&] { return calls.load() > 0; });
  ASSERT_EQ(told.get_future().wait_for(milliseconds(5000)), std::future_status::ready);
  ASSERT_TRUE(job.nodes[0]->peer_failure().has_value());
  EXPECT_EQ(job.nodes[0]->peer_failure()->message, "rank 1 failed");
  int late = 0;
  job.nodes[0]->on_peer_failure([&] { ++late; });  // already failed: told at once
  EXPECT_EQ(late, 1);
  job.nodes[0]->on_peer_failure(nullptr);
  EXPECT_EQ(calls.load(), 1);
  job.exit_all();
}

// Three static nodes; node 2's launcher is killed (its connections close,
// it says nothing) after the others start watching, or before: either way
// both learn within a second that it is lost, not at the heartbeat timeout.
void killed_launcher_is_lost_within_a_second(bool before_the_watch) {
  Job job;
  for (int k = 0; k < 3; ++k) {
    RdzvSettings s = static_node(k, 3);
    s.heartbeat_timeout = milliseconds(30'000);  // the connection tells, not the heartbeat
    job.add(s);
  }
  (void)job.join_all(job.all());
  if (!before_the_watch) {
    for (auto& n : job.nodes) job.watch(*n);
  }
  const auto start = job.clock.now();
  job.nodes[2].reset();
  if (before_the_watch) {
    for (std::size_t k = 0; k < 2; ++k) job.watch(*job.nodes[k]);
  }
  const auto f0 = await_peer(job, *job.nodes[0]);
  const auto f1 = await_peer(job, *job.nodes[1]);
  ASSERT_TRUE(f0.has_value());
  ASSERT_TRUE(f1.has_value());
  EXPECT_LT(job.clock.now() - start, milliseconds(3000));
  EXPECT_NE(f0->message.find("node 2 (node2 pid 1) is lost: its launcher's connection to the "
                             "rendezvous closed"),
            std::string::npos)
      << f0->message;
  EXPECT_EQ(f1->message, f0->message);
  job.exit_all();
}

TEST(Rendezvous, ALauncherWhoseConnectionClosesIsLostWithinASecond) {
  killed_launcher_is_lost_within_a_second(false);
}

// The race the test above ran into once in a hundred: the host's first look
// came after the killed launcher's key had gone, and a key never seen was not
// taken for a loss, so only the heartbeat timeout (30 s) would have told.
TEST(Rendezvous, ALauncherWhoseConnectionClosedBeforeTheWatchBeganIsLostToo) {
  killed_launcher_is_lost_within_a_second(true);
}

// The watch's connection ends before the launcher says it is done (its
// round's loop is over; finish() comes next): the launcher's join connection
// still holds its alive key, so nobody takes it for lost meanwhile.
TEST(Rendezvous, ALauncherWhoseWatchEndedBeforeItSaidDoneIsNotLost) {
  Job job;
  for (int k = 0; k < 2; ++k) {
    RdzvSettings s = static_node(k, 2);
    s.heartbeat_timeout = milliseconds(30'000);  // the alive keys tell, not the heartbeat
    job.add(s);
  }
  (void)job.join_all(job.all());
  for (auto& n : job.nodes) job.watch(*n);
  job.pass(milliseconds(3000));  // both watches beat for a while
  job.nodes[1]->stop_watch();
  job.pass(milliseconds(5000));  // five times what a closed connection takes to be a loss
  EXPECT_FALSE(job.nodes[0]->peer_failure().has_value()) << job.nodes[0]->peer_failure()->message;
  job.exit_all();
}

TEST(Rendezvous, ALauncherThatStopsHeartbeatingIsLostAfterTheTimeout) {
  Job job;
  for (int k = 0; k < 2; ++k) {
    RdzvSettings s = static_node(k, 2);
    s.heartbeat_timeout = milliseconds(400);
    job.add(s);
  }
  (void)job.join_all(job.all());
  // Node 1 stays connected but never beats (a launcher stopped with SIGSTOP).
  job.watch(*job.nodes[0]);
  const auto start = job.clock.now();
  const auto f = await_peer(job, *job.nodes[0]);
  ASSERT_TRUE(f.has_value());
  EXPECT_GE(job.clock.now() - start, milliseconds(400));
  EXPECT_NE(f->message.find("node 1 (node1 pid 1) is lost: its launcher sent no heartbeat to "
                            "the rendezvous for 0.4 s (--heartbeat-timeout)"),
            std::string::npos)
      << f->message;
  job.exit_all();
}

TEST(Rendezvous, TheExitBarrierWaitsForEveryNodeAndPassesOnALateFailure) {
  {
    Job job;
    for (int k = 0; k < 3; ++k) job.add(static_node(k, 3));
    (void)job.join_all(job.all());
    for (auto& n : job.nodes) job.watch(*n);
    for (auto& n : job.nodes) n->stop_watch();  // the round's loop ends before the barrier
    std::vector<std::shared_ptr<Barrier>> bs;
    for (Rendezvous* r : job.all()) bs.push_back(job.start_barrier(*r));
    ASSERT_TRUE(job.drive(
        [&] { return std::all_of(bs.begin(), bs.end(), [](const auto& b) { return b->done; }); }));
    for (const auto& b : bs) EXPECT_FALSE(b->failure.has_value());
    job.exit_all();
  }
  {
    Job job;
    for (int k = 0; k < 3; ++k) job.add(static_node(k, 3));
    (void)job.join_all(job.all());
    for (auto& n : job.nodes) job.watch(*n);
    // Nodes 0 and 1 succeed and wait at the barrier; node 2's rank fails later.
    for (std::size_t k = 0; k < 2; ++k) job.nodes[k]->stop_watch();
    const auto b0 = job.start_barrier(*job.nodes[0]);
    const auto b1 = job.start_barrier(*job.nodes[1]);
    job.pass(milliseconds(200));
    EXPECT_FALSE(b0->done);
    job.nodes[2]->publish_failure("rank 4 failed", 3, false);
    ASSERT_TRUE(job.drive([&] { return b0->done && b1->done; }));
    const auto w0 = b0->failure;
    const auto w1 = b1->failure;
    ASSERT_TRUE(w0.has_value());
    ASSERT_TRUE(w1.has_value());
    EXPECT_EQ(w0->message, "rank 4 failed");
    EXPECT_EQ(w1->status, 3);
    EXPECT_FALSE(job.nodes[2]->agreed_failure(milliseconds(3000)).has_value());  // its own won
    job.exit_all();
  }
}

// Issue 34: at the exit barrier, a host too slow to answer (its machine
// saturated: 1024 launchers on two cores) is not lost before the heartbeat
// timeout: a call with no answer in time is asked again on a new
// connection; the host, its own store's client too, never takes its store
// for lost. One silent past the timeout is lost as before.
TEST(Rendezvous, AHostTooSlowToAnswerAtTheBarrierIsNotLostBeforeTheHeartbeatTimeout) {
  for (const bool comes_back : {true, false}) {
    Job job;
    for (int k = 0; k < 2; ++k) {
      RdzvSettings s = static_node(k, 2);
      s.heartbeat_timeout = milliseconds(30'000);  // asks every 10 s, no answer after 15 s
      job.add(std::move(s));
    }
    (void)job.join_all(job.all());
    for (auto& n : job.nodes) job.watch(*n);
    job.nodes[1]->stop_watch();
    const auto b1 = job.start_barrier(*job.nodes[1]);
    job.pass(milliseconds(200));
    job.net.stall(true);
    job.pass(milliseconds(20'000));  // one call unanswered after 15 s, asked again
    ASSERT_FALSE(b1->done) << "taken for lost before the heartbeat timeout";
    if (!comes_back) {
      ASSERT_TRUE(job.drive([&] { return b1->done; }));
      ASSERT_TRUE(b1->failure.has_value());
      EXPECT_NE(b1->failure->message.find("lost the rendezvous store at "), std::string::npos)
          << b1->failure->message;
      EXPECT_NE(b1->failure->message.find("while waiting for the other nodes to finish"),
                std::string::npos)
          << b1->failure->message;
      job.net.stall(false);
      job.exit_all();
      continue;
    }
    job.net.stall(false);
    job.nodes[0]->stop_watch();
    const auto b0 = job.start_barrier(*job.nodes[0]);
    ASSERT_TRUE(job.drive([&] { return b0->done && b1->done; }));
    EXPECT_FALSE(b0->failure.has_value());
    EXPECT_FALSE(b1->failure.has_value()) << b1->failure->message;
    job.exit_all();
  }
}

TEST(Rendezvous, ALateLauncherIsTakenInAtTheNextRoundWithoutCountingARestart) {
  Job job;
  for (const char* n : {"a", "b"}) {
    RdzvSettings s = launcher(n, false, 2, 3);
    s.max_restarts = 2;
    job.add(s);
  }
  const auto first = job.join_all(job.all());
  ASSERT_EQ(first[0].nnodes, 2);
  for (auto& n : job.nodes) job.watch(*n);
  RdzvSettings late = launcher("c", false, 2, 3);
  late.max_restarts = 2;
  Rendezvous& c = job.add(late);
  const auto joined = job.start_join(c);
  // The running nodes hear that a launcher waits: not a failure.
  for (int k = 0; k < 2; ++k) {
    const auto f = await_peer(job, *job.nodes[static_cast<std::size_t>(k)]);
    ASSERT_TRUE(f.has_value());
    EXPECT_TRUE(f->joining) << f->message;
    EXPECT_NE(f->message.find("to take in the launcher waiting to join (c pid 1)"),
              std::string::npos)
        << f->message;
  }
  job.finish_all({job.nodes[0].get(), job.nodes[1].get()}, false);
  const auto again = job.join_all({job.nodes[0].get(), job.nodes[1].get()}, 1);
  ASSERT_TRUE(job.drive([&] { return joined->done; }));
  const Membership mc = joined->get();
  EXPECT_EQ(mc.round, 1);
  EXPECT_EQ(mc.nnodes, 3);
  std::set<int> ranks{mc.node_rank};
  for (const Membership& m : again) {
    EXPECT_EQ(m.nnodes, 3);
    EXPECT_EQ(m.names, mc.names);
    ranks.insert(m.node_rank);
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2}));
}

TEST(Rendezvous, TheHostLostASurvivorHostsTheNextRound) {
  Job job;
  for (const char* n : {"a", "b", "c"}) {
    RdzvSettings s = launcher(n, false, 2, 3);
    s.max_restarts = 1;
    job.add(s);
  }
  const auto first = job.join_all(job.all());
  for (auto& n : job.nodes) job.watch(*n);
  // Which object hosts: the one whose membership says so.
  std::size_t host = 0;
  for (std::size_t i = 0; i < first.size(); ++i) {
    if (first[i].hosting) host = i;
  }
  job.nodes[host].reset();  // the host's launcher is killed, its store with it
  std::vector<Rendezvous*> survivors;
  for (auto& n : job.nodes) {
    if (!n) continue;
    const auto f = await_peer(job, *n);
    ASSERT_TRUE(f.has_value());
    EXPECT_FALSE(f->final) << f->message;
    EXPECT_NE(f->message.find("(with a restart left, a surviving launcher hosts it anew)"),
              std::string::npos)
        << f->message;
    EXPECT_FALSE(n->store_lost());
    survivors.push_back(n.get());
  }
  job.finish_all(survivors, false);
  const auto next = job.join_all(survivors, 1);
  ASSERT_EQ(next.size(), 2U);
  EXPECT_EQ(next[0].nnodes, 2);
  EXPECT_EQ(next[1].nnodes, 2);
  EXPECT_NE(next[0].node_rank, next[1].node_rank);
  EXPECT_NE(next[0].hosting, next[1].hosting);
  EXPECT_EQ(next[0].master_port, next[1].master_port);
  EXPECT_EQ(job.net.stores_hosted(), 2);  // the old one and the successor's
}

TEST(Rendezvous, TheHostLostWithoutARestartLeftEndsTheJob) {
  Job job;
  for (int k = 0; k < 2; ++k) job.add(static_node(k, 2));
  (void)job.join_all(job.all());
  for (auto& n : job.nodes) job.watch(*n);
  job.nodes[0].reset();
  const auto f = await_peer(job, *job.nodes[1]);
  ASSERT_TRUE(f.has_value());
  EXPECT_TRUE(f->final);
  EXPECT_NE(f->message.find("lost the rendezvous store at 127.0.0.1:29500 hosted by node 0 "
                            "(node0 pid 1)"),
            std::string::npos)
      << f->message;
  EXPECT_TRUE(job.nodes[1]->store_lost());
  job.exit_all();
}

}  // namespace
}  // namespace dlaunch
