// --check's network test between nodes (issue 33), a feature of the job
// (controller/feature.h): once the reach test chose node 0's address, every
// agent listens (NetListen), then each node streams to another for a round's
// time (NetSend) and reports what the receiver acknowledged (NetSent).
// Round 1 is a ring (node k to k+1), so every node sends once and receives
// once, all at the same time: a node's link is measured in both directions,
// and the test takes the same time at 8 nodes as at 1000. From three nodes,
// round 2 is the ring the other way (k to k-1): a slow sender is then slow
// toward two different receivers, a slow receiver from two different
// senders, which names the node rather than the link (check/health.h judges
// the figures). Rounds 3 and 4 run the streams of rounds 1 and 2 that were
// slow again, alone.
//
// It owns its rounds, each node's listening port and answer, and its own
// deadline; what it found is streams() and, where it did not run or finish,
// untested(). It ends once (on_end): after its last round, at a node that
// cannot listen or has no address on the job's network, at its deadline. A
// job that stops meanwhile ends it without a word.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "controller/feature.h"
#include "dlaunch/clock.h"
#include "dlaunch/proto/protocol.h"
#include "net/master_address.h"
#include "net/stream.h"

namespace dlaunch {

class BandwidthTest final : public JobFeature {
 public:
  // `round`: each round's time (ControllerConfig::bandwidth_round).
  // `on_end`: called once the test is over (not when the job stopped it).
  BandwidthTest(JobAccess& job, Clock& clock, std::chrono::milliseconds round,
                std::function<void()> on_end);
  BandwidthTest(const BandwidthTest&) = delete;
  BandwidthTest& operator=(const BandwidthTest&) = delete;

  // Begins, once the reach test chose `chosen` among node 0's `candidates`:
  // `reach` is what each other node found (node k at k - 1), `interfaces`
  // each node's (its Ready). Node 0 is reached at the chosen address; any
  // other node at its address on the interface its traffic to node 0 left by.
  void begin(const std::string& chosen, const std::vector<net::Candidate>& candidates,
             const std::vector<net::NodeReach>& reach,
             const std::vector<std::vector<proto::Interface>>& interfaces);
  void on_listening(std::size_t node, const proto::NetListening& m);
  void on_sent(std::size_t node, proto::NetSent&& m);

  bool running() const { return running_; }
  // Every stream of every round, in the order they were sent.
  const std::vector<net::Stream>& streams() const { return streams_; }
  // Why the test did not run or finish; empty if it did.
  const std::string& untested() const { return untested_; }

  void on_phase(JobPhase now) override;

 private:
  void send_round(std::uint32_t round);
  void finish_round(std::uint32_t round);
  void arm(std::chrono::milliseconds after, std::string what);
  void end(std::string why);

  JobAccess& job_;
  Clock& clock_;
  std::chrono::milliseconds round_time_;
  std::function<void()> on_end_;
  std::unique_ptr<Timer> deadline_;
  bool running_ = false;
  std::uint32_t round_ = 0;           // 0: waiting for every node to listen
  std::string token_;                 // what each of its streams begins with
  std::vector<std::string> address_;  // each node's address on the job's network
  std::vector<std::uint16_t> port_;   // where each node listens (0: not yet)
  std::vector<bool> listening_;
  std::vector<bool> sent_;  // this round's NetSent came (or it sends nothing)
  std::vector<net::Stream> streams_;
  std::string untested_;
};

}  // namespace dlaunch
