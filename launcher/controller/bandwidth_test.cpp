#include "controller/bandwidth_test.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "dlaunch/random.h"
#include "dlaunch/tunables.h"

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

BandwidthTest::BandwidthTest(JobAccess& job, Clock& clock, std::chrono::milliseconds round,
                             std::function<void()> on_end)
    : job_(job),
      clock_(clock),
      round_time_(round),
      on_end_(std::move(on_end)),
      deadline_(clock.make_timer()) {}

void BandwidthTest::begin(const std::string& chosen, const std::vector<net::Candidate>& candidates,
                          const std::vector<net::NodeReach>& reach,
                          const std::vector<std::vector<proto::Interface>>& interfaces) {
  running_ = true;
  round_ = 0;
  const std::size_t n = interfaces.size();
  std::size_t chosen_at = 0;
  for (std::size_t c = 0; c < candidates.size(); ++c) {
    if (candidates[c].address == chosen) chosen_at = c;
  }
  const auto family = chosen.find(':') == std::string::npos ? proto::AddressFamily::kIpv4
                                                            : proto::AddressFamily::kIpv6;
  address_.assign(n, {});
  address_[0] = chosen;
  for (std::size_t k = 1; k < n; ++k) {
    const auto& outcomes = reach.at(k - 1).outcomes;
    const std::string interface =
        chosen_at < outcomes.size() ? outcomes[chosen_at].interface : std::string();
    address_[k] = address_on(interfaces[k], interface, family);
    if (address_[k].empty()) {
      end(fmt::format("{} has no address on the interface ({}) its traffic to node 0 takes",
                      job_.node_label(k), interface.empty() ? "unknown" : interface));
      return;
    }
  }
  token_ = random_hex(16);
  port_.assign(n, 0);
  listening_.assign(n, false);
  sent_.assign(n, true);
  for (std::size_t k = 0; k < n; ++k) job_.send(k, proto::NetListen{.token = token_});
  arm(timing::kProbeConnect + timing::kReportMargin, "every node to listen for the network test");
}

void BandwidthTest::on_listening(std::size_t i, const proto::NetListening& m) {
  if (!running_ || round_ != 0 || i >= listening_.size() || listening_[i]) return;
  listening_[i] = true;
  port_[i] = m.port;
  if (m.port == 0) {
    end(fmt::format("{} cannot listen for the network test: {}", job_.node_label(i), m.error));
    return;
  }
  if (std::find(listening_.begin(), listening_.end(), false) != listening_.end()) return;
  send_round(1);
}

void BandwidthTest::send_round(std::uint32_t round) {
  const std::size_t n = address_.size();
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
    for (const auto& s : streams_) {
      if (s.round <= 2 && s.error.empty() && s.micros > 0) all.push_back(net::gbps(s));
    }
    if (!all.empty()) {
      std::nth_element(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(all.size() / 2),
                       all.end());
      const double median = all[all.size() / 2];
      for (const auto& s : streams_) {
        if (s.round == round - 2 && s.error.empty() && s.micros > 0 && net::gbps(s) < median / 2) {
          pairs.emplace_back(s.from, s.to);
        }
      }
    }
    if (pairs.empty()) {
      finish_round(round);
      return;
    }
  }
  round_ = round;
  const auto ms = static_cast<std::uint32_t>(round_time_.count());
  const std::chrono::milliseconds timeout =
      round_time_ + timing::kProbeConnect + timing::kReportMargin;
  sent_.assign(n, true);  // those that send nothing this round
  for (const auto& [from, to] : pairs) {
    sent_[from] = false;
    streams_.push_back({.from = from, .to = to, .round = round});
    job_.send(from, proto::NetSend{.round = round,
                                   .address = address_[to],
                                   .port = port_[to],
                                   .token = token_,
                                   .duration_ms = ms,
                                   .timeout_ms = static_cast<std::uint32_t>(timeout.count())});
  }
  arm(timeout + timing::kReportMargin,
      fmt::format("every node to finish round {} of the network test", round));
}

void BandwidthTest::on_sent(std::size_t i, proto::NetSent&& m) {
  if (!running_ || round_ == 0 || m.round != round_ || i >= sent_.size() || sent_[i]) return;
  sent_[i] = true;
  for (auto& s : streams_) {
    if (s.round == m.round && s.from == i) {
      s.bytes = m.bytes;
      s.micros = m.micros;
      s.error = std::move(m.error);
    }
  }
  if (std::find(sent_.begin(), sent_.end(), false) != sent_.end()) return;
  deadline_->cancel();
  finish_round(round_);
}

// Round `round` is over: the next (the ring the other way from three nodes,
// then the retests of each), or the end of the test.
void BandwidthTest::finish_round(std::uint32_t round) {
  const std::size_t n = address_.size();
  if (round == 1 && n >= 3) {
    send_round(2);
  } else if (round <= 2) {
    send_round(3);
  } else if (round == 3 && n >= 3) {
    send_round(4);
  } else {
    end({});
  }
}

void BandwidthTest::arm(std::chrono::milliseconds after, std::string what) {
  // Not finishing is said in --check's report, not a failure of the agents.
  clock_.after(*deadline_, after, [this, after, what = std::move(what)] {
    end("gave up waiting " + seconds_text(after) + " for " + what);
  });
}

void BandwidthTest::end(std::string why) {
  if (!running_) return;
  running_ = false;
  deadline_->cancel();
  untested_ = std::move(why);
  if (on_end_) on_end_();
}

void BandwidthTest::on_phase(JobPhase now) {
  // The job stops (a node lost, an interrupt): the test with it, unsaid.
  if (job_stopping(now)) {
    running_ = false;
    deadline_->cancel();
  }
}

}  // namespace dlaunch
