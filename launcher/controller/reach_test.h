// The reach test at a job's start (net/master_address.h), a feature of the
// job (controller/feature.h): once every agent is ready and the job spans
// machines with no address given, every node but node 0 tries to connect to
// each of node 0's addresses at its reserved port (Probe) and says which it
// reached (ProbeResult); the first address every node reached becomes
// MASTER_ADDR and the store's address.
//
// It holds the job's Start until it has chosen: it owns the addresses tried,
// each node's answer and its own deadline, and ends once (on_end), when
// every node has answered, whatever they found (chosen() or problems()). A
// node that does not answer in time fails the job, named. A job that stops
// meanwhile (a node lost, an interrupt) ends it without a word, through the
// phase move.
#pragma once

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

namespace dlaunch {

class ReachTest final : public JobFeature {
 public:
  // `on_end`: called once every node answered (not when the job stopped the
  // test, nor when its deadline failed the job).
  ReachTest(JobAccess& job, Clock& clock, std::function<void()> on_end);
  ReachTest(const ReachTest&) = delete;
  ReachTest& operator=(const ReachTest&) = delete;

  // Begins: each of nodes 1..nodes-1 tries `candidates` (node 0's addresses,
  // in the order of preference) at `port`. With one node, or no candidate,
  // there is nothing to test and it ends at once.
  void begin(std::vector<net::Candidate> candidates, std::uint16_t port, std::size_t nodes);
  void on_result(std::size_t node, proto::ProbeResult&& result);

  bool running() const { return running_; }
  const std::vector<net::Candidate>& candidates() const { return candidates_; }
  // What each node but node 0 found (node k at k - 1).
  const std::vector<net::NodeReach>& reach() const { return reach_; }
  // The address every node reached, once ended; empty: none (problems()).
  const std::string& chosen() const { return chosen_; }
  // Why no address was chosen, the first the root cause.
  const std::vector<std::string>& problems() const { return problems_; }

  void on_phase(JobPhase now) override;

 private:
  void finish();

  JobAccess& job_;
  Clock& clock_;
  std::function<void()> on_end_;
  std::unique_ptr<Timer> deadline_;
  bool running_ = false;
  std::uint16_t port_ = 0;
  std::vector<net::Candidate> candidates_;
  std::vector<net::NodeReach> reach_;
  std::vector<bool> answered_;  // by node; node 0 reaches itself
  std::string chosen_;
  std::vector<std::string> problems_;
};

}  // namespace dlaunch
