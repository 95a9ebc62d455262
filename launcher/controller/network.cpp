// The controller's part in choosing the job's network (net/master_address.h):
// once every agent is ready, whether node 0's addresses are tested (the test
// itself is a feature, controller/reach_test.h), what its outcome means for
// the job, and --check's test alone (probe_only).
#include <fmt/format.h>

#include "controller/controller.h"
#include "dlaunch/debug.h"
#include "dlaunch/process.h"
#include "dlaunch/proto/interfaces.h"
#include "net/job_network.h"

namespace dlaunch {

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
// which they test now (controller/reach_test.h). True when Start must wait
// for their answers (or the job ended here).
bool Controller::begin_network_choice() {
  const auto given = net::given_master_addr(plan_, cfg_.master_addr_explicit);
  const auto not_probed = [&](const std::string& why) {
    reach_untested_ = why;
    if (debug_enabled("net")) say("net: " + why);
    if (!cfg_.probe_only) return false;
    end_probe_only();
    return true;
  };
  if (given) given_addr_ = *given;
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
  if (!given && nodes_.front().interfaces.empty()) {
    return not_probed(node_label(0) + " reported no interfaces: MASTER_ADDR=" + master_addr() +
                      " (the address the head reached it at)");
  }
  reach_.begin(given ? std::vector<net::Candidate>{net::Candidate{.address = *given}}
                     : net::master_candidates(nodes_.front().interfaces),
               master_port_, nodes_.size());
  return true;
}

// The reach test is over (every other node answered, or there was none to
// ask): with an address every node reached, the job starts (or --check goes
// on to its network test); without one, it fails before any worker starts,
// naming the nodes and what they tried.
void Controller::on_reach_tested() {
  if (reach_.chosen().empty()) {
    if (cfg_.probe_only) {
      end_probe_only();
      return;
    }
    const auto& problems = reach_.problems();
    RootCause cause{.kind = CauseKind::kLaunch, .message = problems.front()};
    cause.also.assign(problems.begin() + 1, problems.end());
    fail(std::move(cause));
    return;
  }
  if (!cfg_.probe_only) {
    send_start();
  } else if (cfg_.bandwidth_round.count() > 0 && nodes_.size() > 1) {
    std::vector<std::vector<proto::Interface>> interfaces;
    interfaces.reserve(nodes_.size());
    for (const Node& node : nodes_) interfaces.push_back(node.interfaces);
    bandwidth_.begin(reach_.chosen(), reach_.candidates(), reach_.reach(), interfaces);
  } else {
    end_probe_only();
  }
}

Controller::Network Controller::network() const {
  return {.given = given_addr_,
          .port = reach_.reach().empty() ? std::uint16_t{0} : master_port_,
          .candidates = reach_.candidates(),
          .reach = reach_.reach(),
          .chosen = reach_.chosen(),
          .problems = reach_.problems(),
          .untested = reach_untested_,
          .streams = bandwidth_.streams(),
          .bandwidth_untested = bandwidth_.untested()};
}

// --check's network test is over: every agent goes, nothing was started.
void Controller::end_probe_only() {
  enter(Phase::kShuttingDown);
  for (auto& n : nodes_) {
    if (n.link && n.link->is_open()) n.link->send(proto::Shutdown{});
  }
  arm_deadline(cfg_.kill_grace + timing::kReportMargin, "every agent to exit");
  maybe_finish();
}

}  // namespace dlaunch
