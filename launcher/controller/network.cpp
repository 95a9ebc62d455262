// The controller's part in choosing the job's network (net/master_address.h):
// once every agent is ready, whether node 0's addresses are tested, the test
// itself (Probe to every other node, their ProbeResults) and the choice, and
// --check's test alone (probe_only).
#include <fmt/format.h>

#include "controller/controller.h"
#include "dlaunch/debug.h"
#include "dlaunch/process.h"
#include "dlaunch/proto/interfaces.h"
#include "net/job_network.h"

namespace dlaunch {

namespace {

std::string describe_candidate(const net::Candidate& c) {
  std::string what = c.interface;
  const std::string note = net::tier_note(c.tier);
  if (!note.empty()) what += (what.empty() ? "" : ", ") + note;
  return what.empty() ? c.address : fmt::format("{} ({})", c.address, what);
}

}  // namespace

// Every node runs on this machine: the local ones, and those whose agent
// lists exactly this machine's interfaces (an SSH host on a loopback address,
// say). A tunnel to another machine does not fool it, as the peer's address
// would.
bool Controller::on_this_machine_only() const {
  if (cfg_.spans_machines) return false;
  if (net::all_local(plan_)) return true;
  if (!own_interfaces_ || own_interfaces_->empty()) return false;
  for (const auto& n : nodes_) {
    if (!n.plan->host.on_head_machine() && !n.head_interfaces) return false;
  }
  return true;
}

const std::vector<proto::Interface>& Controller::own_interfaces() {
  if (!own_interfaces_) {
    own_interfaces_ = cfg_.head_interfaces ? *cfg_.head_interfaces : proto::list_interfaces();
  }
  return *own_interfaces_;
}

// Every node is ready. Decides how MASTER_ADDR is found: given, as ever on
// one machine, or one of node 0's addresses that every other node reaches,
// which they test now (Probe). True when Start must wait for their answers
// (or the job ended here).
bool Controller::begin_network_choice() {
  const bool debug = debug_enabled("net");
  const auto given = net::given_master_addr(plan_, cfg_.master_addr_explicit);
  const auto not_probed = [&](const std::string& why) {
    network_.untested = why;
    if (debug) say("net: " + why);
    if (!cfg_.probe_only) return false;
    end_probe_only();
    return true;
  };
  if (given) network_.given = *given;
  on_this_machine_ = on_this_machine_only();
  if (on_this_machine_) {
    return not_probed(fmt::format(
        "every node is on this machine: MASTER_ADDR={}, no address to test", master_addr()));
  }
  if (given && !net::probe_wanted(plan_, cfg_.master_addr_explicit, cfg_.probe_only)) {
    return not_probed(fmt::format(
        "MASTER_ADDR={} is given ({}): not tested", *given,
        cfg_.master_addr_explicit ? "--master-addr" : "node 0's address in the hostfile"));
  }
  if (given) {
    network_.candidates = {net::Candidate{.address = *given}};
  } else if (nodes_.front().interfaces.empty()) {
    return not_probed(node_label(0) + " reported no interfaces: MASTER_ADDR=" + master_addr() +
                      " (the address the head reached it at)");
  } else {
    network_.candidates = net::master_candidates(nodes_.front().interfaces);
  }
  if (debug) {
    std::string list;
    for (const auto& c : network_.candidates)
      list += (list.empty() ? "" : ", ") + describe_candidate(c);
    say(fmt::format("net: {} addresses to try, in order: {}", node_label(0),
                    list.empty() ? "none" : list));
  }
  if (network_.candidates.empty() || nodes_.size() == 1) {
    // Nothing to test: one node reaches its own addresses.
    finish_probe();
    return true;
  }
  probing_ = true;
  network_.port = master_port_;
  proto::Probe probe{.port = master_port_, .timeout_ms = proto::ms(timing::kProbeConnect)};
  for (const auto& c : network_.candidates) probe.addresses.push_back(c.address);
  for (std::size_t k = 1; k < nodes_.size(); ++k) {
    network_.reach.push_back({.node = k, .label = node_label(k), .outcomes = {}});
    nodes_[k].link->send(probe);
  }
  arm_deadline(timing::kProbeConnect + timing::kReportMargin,
               "every node to test which of node 0's addresses it reaches");
  return true;
}

void Controller::on_probe_result(std::size_t i, proto::ProbeResult&& result) {
  if (!probing_ || i == 0 || nodes_[i].probe_answered) return;
  nodes_[i].probe_answered = true;
  network_.reach.at(i - 1).outcomes = std::move(result.outcomes);
  if (phase_ != Phase::kStarting || cause_.kind != CauseKind::kNone) return;
  for (std::size_t k = 1; k < nodes_.size(); ++k) {
    if (!nodes_[k].probe_answered) return;
  }
  finish_probe();
}

// Every other node has answered (or there is none): the first of node 0's
// addresses that all reached is the job's. None: the job fails before any
// worker starts, naming the nodes and what they tried.
void Controller::finish_probe() {
  probing_ = false;
  deadline_->cancel();
  const auto choice =
      net::choose_master_address(network_.candidates, network_.reach, node_label(0), master_port_);
  if (debug_enabled("net")) {
    for (const auto& n : network_.reach) {
      std::string each;
      for (std::size_t c = 0; c < network_.candidates.size(); ++c) {
        const proto::ProbeOutcome none;
        const auto& o = c < n.outcomes.size() ? n.outcomes[c] : none;
        const std::string how = o.reached
                                    ? "reached" + (o.interface.empty() ? "" : " via " + o.interface)
                                    : "not reached (" + o.error + ")";
        each +=
            fmt::format("{}{} {}", each.empty() ? "" : "; ", network_.candidates[c].address, how);
      }
      say(fmt::format("net: {}: {}", n.label, each));
    }
    if (choice.chosen) {
      const auto& c = network_.candidates[*choice.chosen];
      say(fmt::format("net: MASTER_ADDR={}{}, reached by every node (TCP port {})", c.address,
                      c.interface.empty() ? "" : " (" + c.interface + " on node 0)", master_port_));
    } else {
      for (const auto& p : choice.problems) say("net: " + p);
    }
  }
  if (!choice.chosen) {
    network_.problems = choice.problems;
    if (cfg_.probe_only) {
      end_probe_only();
      return;
    }
    RootCause cause{.kind = CauseKind::kLaunch, .message = choice.problems.front()};
    cause.also.assign(choice.problems.begin() + 1, choice.problems.end());
    fail(std::move(cause));
    return;
  }
  network_.chosen = network_.candidates[*choice.chosen].address;
  if (cfg_.probe_only) {
    if (cfg_.bandwidth_round.count() > 0 && nodes_.size() > 1) {
      std::vector<std::vector<proto::Interface>> interfaces;
      interfaces.reserve(nodes_.size());
      for (const Node& node : nodes_) interfaces.push_back(node.interfaces);
      bandwidth_.begin(network_.chosen, network_.candidates, network_.reach, interfaces);
    } else {
      end_probe_only();
    }
    return;
  }
  send_start();
}

// --check's network test is over: every agent goes, nothing was started.
void Controller::end_probe_only() {
  probing_ = false;
  enter(Phase::kShuttingDown);
  for (auto& n : nodes_) {
    if (n.link && n.link->is_open()) n.link->send(proto::Shutdown{});
  }
  arm_deadline(cfg_.kill_grace + timing::kReportMargin, "every agent to exit");
  maybe_finish();
}

}  // namespace dlaunch
