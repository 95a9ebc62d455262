// --check's network test between nodes (issue 33), after the reach test
// chose node 0's address: every agent listens (NetListen), then each node
// streams to another for a round's time (NetSend) and reports what the
// receiver acknowledged (NetSent). Round 1 is a ring (node k to k+1), so
// every node sends once and receives once, all at the same time: a node's
// link is measured in both directions, and the test takes the same time at
// 8 nodes as at 1000. From three nodes, round 2 is the ring the other way
// (k to k-1): a slow sender is then slow toward two different receivers,
// a slow receiver from two different senders, which names the node rather
// than the link (check/health.h judges the figures). Rounds 3 and 4 run the
// streams of rounds 1 and 2 that were slow again, alone.
#include <algorithm>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "controller/controller.h"
#include "dlaunch/random.h"

namespace dlaunch {

namespace {

// The address `interface` of a node has in `family`: what its peers reach
// it at on the job's network. Empty when it has none.
std::string address_on(const std::vector<proto::Interface>& interfaces,
                       const std::string& interface, proto::AddressFamily family) {
  for (const auto& i : interfaces) {
    if (i.name == interface && i.family == family && !i.loopback &&
        i.address.rfind("fe80:", 0) != 0) {
      return i.address;
    }
  }
  return {};
}

}  // namespace

void Controller::begin_bandwidth() {
  net_testing_ = true;
  net_round_ = 0;
  // Each node's address: node 0's is the chosen one; another node's, its
  // address on the interface its traffic to node 0 left by (the reach test).
  std::size_t chosen_at = 0;
  for (std::size_t c = 0; c < network_.candidates.size(); ++c) {
    if (network_.candidates[c].address == network_.chosen) chosen_at = c;
  }
  const auto family = network_.chosen.find(':') == std::string::npos ? proto::AddressFamily::kIpv4
                                                                     : proto::AddressFamily::kIpv6;
  net_address_.assign(nodes_.size(), {});
  net_address_[0] = network_.chosen;
  for (std::size_t k = 1; k < nodes_.size(); ++k) {
    const auto& reach = network_.reach.at(k - 1);
    const std::string interface =
        chosen_at < reach.outcomes.size() ? reach.outcomes[chosen_at].interface : std::string();
    net_address_[k] = address_on(nodes_[k].interfaces, interface, family);
    if (net_address_[k].empty()) {
      network_.bandwidth_untested =
          fmt::format("{} has no address on the interface ({}) its traffic to node 0 takes",
                      node_label(k), interface.empty() ? "unknown" : interface);
      end_probe_only();
      return;
    }
  }
  net_token_ = random_hex(16);
  for (auto& n : nodes_) {
    n.net_listening = false;
    n.link->send(proto::NetListen{.token = net_token_});
  }
  arm_deadline(timing::kProbeConnect + timing::kReportMargin,
               "every node to listen for the network test");
}

void Controller::on_net_listening(std::size_t i, const proto::NetListening& m) {
  if (!net_testing_ || net_round_ != 0 || nodes_[i].net_listening) return;
  nodes_[i].net_listening = true;
  nodes_[i].net_port = m.port;
  if (m.port == 0) {
    network_.bandwidth_untested =
        fmt::format("{} cannot listen for the network test: {}", node_label(i), m.error);
    end_probe_only();
    return;
  }
  for (const auto& n : nodes_) {
    if (!n.net_listening) return;
  }
  send_bandwidth_round(1);
}

void Controller::send_bandwidth_round(std::uint32_t round) {
  const std::size_t n = nodes_.size();
  std::vector<std::pair<std::size_t, std::size_t>> pairs;  // (from, to)
  if (round <= 2) {
    for (std::size_t k = 0; k < n; ++k)
      pairs.emplace_back(k, round == 1 ? (k + 1) % n : (k + n - 1) % n);
  } else {
    // Rounds 3 and 4 run again, with nothing else on the wire, the streams
    // of round 1 and 2 that ran at less than half the median: a link that
    // was only crowded (by the other streams on a shared switch or a busy
    // CPU) shows its speed now; a slow one stays slow.
    std::vector<double> all;
    for (const auto& s : network_.streams) {
      if (s.round <= 2 && s.error.empty() && s.micros > 0) all.push_back(net::gbps(s));
    }
    if (!all.empty()) {
      std::nth_element(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(all.size() / 2),
                       all.end());
      const double median = all[all.size() / 2];
      for (const auto& s : network_.streams) {
        if (s.round == round - 2 && s.error.empty() && s.micros > 0 && net::gbps(s) < median / 2) {
          pairs.emplace_back(s.from, s.to);
        }
      }
    }
    if (pairs.empty()) {
      finish_bandwidth_round(round);
      return;
    }
  }
  net_round_ = round;
  const auto ms = static_cast<std::uint32_t>(cfg_.bandwidth_round.count());
  const std::chrono::milliseconds timeout =
      cfg_.bandwidth_round + timing::kProbeConnect + timing::kReportMargin;
  for (auto& node : nodes_) node.net_sent = true;  // those that send nothing this round
  for (const auto& [from, to] : pairs) {
    nodes_[from].net_sent = false;
    network_.streams.push_back({.from = from, .to = to, .round = round});
    nodes_[from].link->send(
        proto::NetSend{.round = round,
                       .address = net_address_[to],
                       .port = nodes_[to].net_port,
                       .token = net_token_,
                       .duration_ms = ms,
                       .timeout_ms = static_cast<std::uint32_t>(timeout.count())});
  }
  arm_deadline(timeout + timing::kReportMargin,
               fmt::format("every node to finish round {} of the network test", round));
}

void Controller::on_net_sent(std::size_t i, proto::NetSent&& m) {
  if (!net_testing_ || m.round != net_round_ || nodes_[i].net_sent) return;
  nodes_[i].net_sent = true;
  for (auto& s : network_.streams) {
    if (s.round == m.round && s.from == i) {
      s.bytes = m.bytes;
      s.micros = m.micros;
      s.error = std::move(m.error);
    }
  }
  for (const auto& n : nodes_) {
    if (!n.net_sent) return;
  }
  deadline_->cancel();
  finish_bandwidth_round(net_round_);
}

// Round `round` is over: the next (the ring the other way from three nodes,
// then the retests of each), or the end of the test.
void Controller::finish_bandwidth_round(std::uint32_t round) {
  if (round == 1 && nodes_.size() >= 3) {
    send_bandwidth_round(2);
  } else if (round <= 2) {
    send_bandwidth_round(3);
  } else if (round == 3 && nodes_.size() >= 3) {
    send_bandwidth_round(4);
  } else {
    end_probe_only();
  }
}

}  // namespace dlaunch
