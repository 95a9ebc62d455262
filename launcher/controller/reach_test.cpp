#include "controller/reach_test.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "dlaunch/debug.h"
#include "dlaunch/tunables.h"

namespace dlaunch {

namespace {

std::string describe_candidate(const net::Candidate& c) {
  std::string what = c.interface;
  const std::string note = net::tier_note(c.tier);
  if (!note.empty()) what += (what.empty() ? "" : ", ") + note;
  return what.empty() ? c.address : fmt::format("{} ({})", c.address, what);
}

}  // namespace

ReachTest::ReachTest(JobAccess& job, Clock& clock, std::function<void()> on_end)
    : job_(job), clock_(clock), on_end_(std::move(on_end)), deadline_(clock.make_timer()) {}

void ReachTest::begin(std::vector<net::Candidate> candidates, std::uint16_t port,
                      std::size_t nodes) {
  candidates_ = std::move(candidates);
  port_ = port;
  reach_.clear();
  chosen_.clear();
  problems_.clear();
  running_ = true;
  if (debug_enabled("net")) {
    std::string list;
    for (const auto& c : candidates_) list += (list.empty() ? "" : ", ") + describe_candidate(c);
    job_.say(fmt::format("net: {} addresses to try, in order: {}", job_.node_label(0),
                         list.empty() ? "none" : list));
  }
  if (candidates_.empty() || nodes <= 1) {
    // Nothing to test: one node reaches its own addresses.
    finish();
    return;
  }
  answered_.assign(nodes, false);
  answered_[0] = true;
  proto::Probe probe{.port = port_, .timeout_ms = proto::ms(timing::kProbeConnect)};
  for (const auto& c : candidates_) probe.addresses.push_back(c.address);
  for (std::size_t k = 1; k < nodes; ++k) {
    reach_.push_back({.node = k, .label = job_.node_label(k), .outcomes = {}});
    job_.send(k, probe);
  }
  const auto after = timing::kProbeConnect + timing::kReportMargin;
  clock_.after(*deadline_, after, [this, after] {
    if (!running_) return;
    running_ = false;
    std::string late;
    for (std::size_t k = 1; k < answered_.size(); ++k) {
      if (!answered_[k]) late += (late.empty() ? "" : ", ") + job_.node_label(k);
    }
    job_.fail({.kind = CauseKind::kLaunch,
               .message = "gave up waiting " + seconds_text(after) +
                          " for every node to test which of node 0's addresses it reaches; "
                          "no answer from: " +
                          late});
  });
}

void ReachTest::on_result(std::size_t i, proto::ProbeResult&& result) {
  if (i == 0 || i >= answered_.size() || answered_[i]) return;
  answered_[i] = true;
  reach_.at(i - 1).outcomes = std::move(result.outcomes);  // kept for --check's report
  if (!running_ || job_.phase() != JobPhase::kStarting || job_.cause().kind != CauseKind::kNone)
    return;
  if (std::find(answered_.begin(), answered_.end(), false) != answered_.end()) return;
  finish();
}

// Every other node has answered (or there is none): the first of node 0's
// addresses that all reached is the job's, or none, and why.
void ReachTest::finish() {
  running_ = false;
  deadline_->cancel();
  const auto choice = net::choose_master_address(candidates_, reach_, job_.node_label(0), port_);
  if (debug_enabled("net")) {
    for (const auto& n : reach_) {
      std::string each;
      for (std::size_t c = 0; c < candidates_.size(); ++c) {
        const proto::ProbeOutcome none;
        const auto& o = c < n.outcomes.size() ? n.outcomes[c] : none;
        const std::string how = o.reached
                                    ? "reached" + (o.interface.empty() ? "" : " via " + o.interface)
                                    : "not reached (" + o.error + ")";
        each += fmt::format("{}{} {}", each.empty() ? "" : "; ", candidates_[c].address, how);
      }
      job_.say(fmt::format("net: {}: {}", n.label, each));
    }
    if (choice.chosen) {
      const auto& c = candidates_[*choice.chosen];
      job_.say(fmt::format("net: MASTER_ADDR={}{}, reached by every node (TCP port {})", c.address,
                           c.interface.empty() ? "" : " (" + c.interface + " on node 0)", port_));
    } else {
      for (const auto& p : choice.problems) job_.say("net: " + p);
    }
  }
  if (choice.chosen) {
    chosen_ = candidates_[*choice.chosen].address;
  } else {
    problems_ = choice.problems;
  }
  if (on_end_) on_end_();
}

void ReachTest::on_phase(JobPhase now) {
  // The job stops (a node lost, an interrupt): the test with it, unsaid.
  if (job_stopping(now)) {
    running_ = false;
    deadline_->cancel();
  }
}

}  // namespace dlaunch
