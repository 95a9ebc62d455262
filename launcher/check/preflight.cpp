#include "check/preflight.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include <fmt/format.h>

#include "controller/controller.h"
#include "dlaunch/clock.h"
#include "dlaunch/process.h"
#include "dlaunch/unique_fd.h"
#include "dlaunch/version.h"
#include "jobs/events.h"
#include "net/job_network.h"
#include "output/output_sink.h"
#include "transport/link_factory.h"

namespace dlaunch {

namespace asio = boost::asio;

namespace {

struct Row {
  std::string node, name, host;
  std::string connect = "-", hostkey = "-", auth = "-", agent = "-", wdir = "-", program = "-",
              gpus = "-", reach = "-";
  std::string topology;  // the agent's summary (dlaunch-agent --topology); empty: none
  std::vector<std::string> problems;
  // Its ranks run in a container: their programs are looked for in the
  // image (check_with_agents).
  bool contained = false;
  std::string health = "-";   // the HEALTH column: ok, FAILED, - (not known)
  std::string net_out = "-";  // the network test: its slowest stream out, in (Gb/s)
  std::string net_in = "-";
  health::Facts facts;  // the agent's --health lines, without "health."
  health::ClockOffset clock;
  // The head's wall clock when the node's Setup was sent (plus how long
  // after it the node read its facts) and its Ready read: the node's clock
  // reading lies between.
  long long sent_ns = 0;
  long long received_ns = 0;
};

// The thresholds that are the job's, not one host's (net_ratio, net_gbps,
// gpu_test_mb, gpu_mem_ratio: set under `defaults:` or on the command line,
// so every node has the same): node 0's.
health::Thresholds job_thresholds(const JobPlan& plan, const PreflightOptions& o) {
  return plan.nodes.empty()
             ? health::Thresholds{}
             : health::node_thresholds(plan.nodes.front().host.health, o.threshold_words);
}

// Each node's health facts against the thresholds and the other nodes: the
// HEALTH column and the problems it names.
void judge_health(const JobPlan& plan, const PreflightOptions& o, std::vector<Row>& rows) {
  std::vector<const health::Facts*> facts;
  facts.reserve(rows.size());
  for (const auto& r : rows) facts.push_back(r.facts.empty() ? nullptr : &r.facts);
  const auto across = health::judge_across(facts);
  const auto gpu_bandwidth =
      health::judge_gpu_bandwidth(facts, job_thresholds(plan, o).gpu_mem_ratio);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    Row& r = rows[i];
    if (r.facts.empty()) continue;
    r.clock = health::clock_offset(r.facts, r.sent_ns, r.received_ns);
    const auto& gpus = plan.nodes[i].host.gpus;
    const int need = gpus.empty() ? 0 : *std::max_element(gpus.begin(), gpus.end()) + 1;
    const auto thresholds = health::node_thresholds(plan.nodes[i].host.health, o.threshold_words);
    auto problems = health::judge_node(r.facts, thresholds, r.clock, need);
    problems.insert(problems.end(), across[i].begin(), across[i].end());
    problems.insert(problems.end(), gpu_bandwidth[i].begin(), gpu_bandwidth[i].end());
    r.health = problems.empty() ? "ok" : "FAILED";
    r.problems.insert(r.problems.end(), problems.begin(), problems.end());
  }
}

// Columns, padded to the widest cell.
void print_table(std::string& text, const std::vector<std::string>& head,
                 const std::vector<std::vector<std::string>>& table) {
  std::vector<std::size_t> width(head.size());
  for (std::size_t c = 0; c < head.size(); ++c) {
    width[c] = head[c].size();
    for (const auto& row : table) width[c] = std::max(width[c], row[c].size());
  }
  auto print_row = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (std::size_t c = 0; c < cells.size(); ++c) {
      line += cells[c];
      if (c + 1 < cells.size()) line += std::string(width[c] - cells[c].size() + 2, ' ');
    }
    text += line + "\n";
  };
  print_row(head);
  for (const auto& row : table) print_row(row);
}

std::string json_strings(const std::vector<std::string>& v) {
  std::string out = "[";
  for (std::size_t k = 0; k < v.size(); ++k) out += (k == 0 ? "" : ",") + json_quote(v[k]);
  return out + "]";
}

// --check --json: the table's cells, the problems and the health facts of
// every node, one object on one line (docs/health.md).
void print_json(std::string& text, const std::vector<Row>& rows, const std::string& network,
                bool network_ok, int failed) {
  std::string out = "{\"nodes\":[";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    out += i == 0 ? "{" : ",{";
    out += fmt::format(
        "\"node\":{},\"name\":{},\"host\":{},\"connect\":{},\"hostkey\":{},\"auth\":{},"
        "\"agent\":{},\"wdir\":{},\"program\":{},\"gpus\":{},\"health\":{},\"reach\":{},"
        "\"net_out_gbps\":{},\"net_in_gbps\":{},\"ok\":{},\"problems\":{}",
        r.node, json_quote(r.name), json_quote(r.host), json_quote(r.connect),
        json_quote(r.hostkey), json_quote(r.auth), json_quote(r.agent), json_quote(r.wdir),
        json_quote(r.program), json_quote(r.gpus), json_quote(r.health), json_quote(r.reach),
        r.net_out == "-" ? "null" : r.net_out, r.net_in == "-" ? "null" : r.net_in,
        r.problems.empty() ? "true" : "false", json_strings(r.problems));
    if (r.clock.known) {
      out += fmt::format(",\"clock_offset_s\":{:.6f},\"clock_uncertainty_s\":{:.6f}",
                         r.clock.offset_s, r.clock.uncertainty_s);
    }
    out += ",\"facts\":{";
    bool first = true;
    for (const auto& [k, v] : r.facts) {
      out += (first ? "" : ",") + json_quote(k) + ":" + json_quote(v);
      first = false;
    }
    out += "}}";
  }
  out += fmt::format("],\"network\":{},\"network_ok\":{},\"passed\":{},\"total\":{},\"ok\":{}}}",
                     json_quote(network), network_ok ? "true" : "false",
                     rows.size() - static_cast<std::size_t>(failed), rows.size(),
                     failed == 0 && network_ok ? "true" : "false");
  text += out + "\n";
}

// The columns and problems a node's Ready fills (Setup.check: the agent
// looked for the working directory, the programs and scripts, and read the
// node's facts).
void take_ready(Row& row, const HostEntry& host, bool has_programs,
                const Controller::NodeCheck& check) {
  const proto::Ready& ready = *check.ready;
  row.wdir = "ok";
  // A contained node's programs are looked for once its container is made:
  // not after a problem that stopped its Setup before (column "").
  const bool stopped_early = std::any_of(ready.problems.begin(), ready.problems.end(),
                                         [](const proto::Problem& p) { return p.column.empty(); });
  if (has_programs || (row.contained && !stopped_early)) row.program = "ok";
  for (const auto& p : ready.problems) {
    if (p.column == "wdir") row.wdir = "MISSING";
    if (p.column == "program") row.program = row.contained ? "FAILED" : "MISSING";
    row.problems.push_back(p.message);
  }
  row.topology = ready.topology;
  long long since_setup = 0;
  for (const auto& [k, v] : ready.facts) {
    if (k == "since_setup_ns") {
      since_setup = std::atoll(v.c_str());
    } else {
      row.facts[k] = v;
    }
  }
  // The node read its clock at least since_setup after the Setup left.
  row.sent_ns = check.setup_sent_ns + since_setup;
  row.received_ns = check.ready_read_ns;
  if (!host.gpus.empty() && ready.gpus >= 0) {
    const int need = *std::max_element(host.gpus.begin(), host.gpus.end()) + 1;
    row.gpus = fmt::format("{}/{}", ready.gpus, need);
    if (ready.gpus < need) {
      row.problems.push_back(fmt::format("the hostfile lists GPU {} but nvidia-smi shows {} GPU(s)",
                                         need - 1, ready.gpus));
    }
  }
}

// The job stopped at Ready (Controller in probe_only): every node's agent is
// started as the job starts it (how far that went: start_cells), with its
// workers described but never started. Each looks for the working directory, the programs (on the
// host, or in the node's container, which it starts, pulling the image as
// --container-pull says) and the scripts, and reads the node's facts
// (take_ready). When every node passed, and `network`, the other nodes then
// try node 0's addresses (the REACH column, the problems of the nodes that
// reached none) and the network test runs. Returns the summary line
// ("network: ...", or why the agents could not be started; empty when the
// rows say it all) and whether all is fine.
std::pair<std::string, bool> check_with_agents(const JobPlan& plan, const PreflightOptions& o,
                                               bool master_addr_explicit, bool network,
                                               std::vector<Row>& rows) {
  asio::io_context io;
  AsioClock clock(io);
  TransportLinks links(io, o.ssh);
  const UniqueFd null_fd(::open("/dev/null", O_WRONLY | O_CLOEXEC));
  OutputSink sink({.job_id = plan.job_id,
                   .node_of_rank = std::vector<std::string>(
                       static_cast<std::size_t>(std::max(plan.world_size, 1)), ""),
                   .stdout_fd = null_fd.get(),
                   .stderr_fd = null_fd.get()});
  // The console is /dev/null (the table is --check's output), but a node
  // pulling its image for minutes is still said.
  struct Notices final : JobObserver {
    void on_notice(std::string_view line) override {
      std::fprintf(stderr, "dlaunch: %.*s\n", static_cast<int>(line.size()), line.data());
    }
  } notices;
  Controller controller(
      plan,
      {.agent_path = o.agent_path,
       .workdir = o.workdir,
       .start_timeout = o.start_timeout,
       .master_addr_explicit = master_addr_explicit,
       .container = o.container,
       .probe_only = true,
       .bandwidth_round = network ? o.bandwidth_round : std::chrono::milliseconds(0),
       .gpu_test_mb = o.gpu_test ? static_cast<std::uint32_t>(
                                       std::max(0.0, job_thresholds(plan, o).gpu_test_mb))
                                 : 0U},
      sink, {.io = io, .links = links, .clock = clock, .observers = {&notices}});
  const int status = controller.run();
  const auto checks = controller.checks();
  bool all_ready = true;
  for (std::size_t k = 0; k < rows.size() && k < checks.size(); ++k) {
    Row& row = rows[k];
    const auto& host = plan.nodes[k].host;
    auto cells = start_cells(host, host.agent.empty() ? o.agent_path : host.agent, checks[k]);
    row.connect = std::move(cells.connect);
    row.hostkey = std::move(cells.hostkey);
    row.auth = std::move(cells.auth);
    row.agent = std::move(cells.agent);
    row.problems.insert(row.problems.end(), cells.problems.begin(), cells.problems.end());
    if (checks[k].ready) {
      take_ready(row, host, !node_programs(plan, k).empty(), checks[k]);
    } else {
      all_ready = false;
      if (!checks[k].refused.empty()) {
        row.problems.push_back(checks[k].refused);
        if (row.contained) row.program = "FAILED";
      } else if (checks[k].hello && row.problems.empty()) {
        // Started, then gone (or stopped) before it was set up.
        row.problems.push_back(checks[k].failed.empty()
                                   ? "its agent did not get ready"
                                   : "its agent ended before it was ready: " + checks[k].failed);
      }
    }
  }
  const bool passed =
      std::all_of(rows.begin(), rows.end(), [](const Row& r) { return r.problems.empty(); });
  if (!passed) return {network ? "network: not tested (fix the problems above first)" : "", false};
  if (status != 0 || !all_ready) {
    return {(network ? "network: not tested: " : "agents: ") + controller.cause().message, false};
  }
  if (!network) return {"", true};
  const auto& net = controller.network();
  const auto& node0 = plan.nodes.front().host.name;
  if (!net.untested.empty()) return {"network: not tested: " + net.untested, true};
  rows.front().reach = "self";
  bool all_reach_some = true;
  for (const auto& n : net.reach) {
    bool any = false;
    for (const auto& outcome : n.outcomes) any = any || outcome.reached;
    Row& row = rows.at(n.node);
    row.reach = any ? "ok" : "FAIL";
    all_reach_some = all_reach_some && any;
    if (!any) {
      row.problems.push_back(
          fmt::format("cannot reach node 0 ({}) at any of its addresses (TCP port {}): {}", node0,
                      net.port, net::describe_attempts(net.candidates, n)));
    }
  }
  // The network test between nodes, once the address was chosen.
  std::string bandwidth;
  if (o.bandwidth_round.count() == 0) {
    bandwidth = "\nnetwork test between nodes: not run (a quick check: --check=quick)";
  } else if (!net.bandwidth_untested.empty()) {
    bandwidth = "\nnetwork test: not run: " + net.bandwidth_untested;
  } else if (!net.streams.empty()) {
    std::vector<std::string> names;
    names.reserve(rows.size());
    for (const auto& r : rows) names.push_back(fmt::format("node {} ({})", r.node, r.name));
    const auto verdict = health::judge_streams(net.streams, names, job_thresholds(plan, o));
    for (std::size_t k = 0; k < rows.size() && k < verdict.problems.size(); ++k) {
      auto& row = rows[k];
      row.problems.insert(row.problems.end(), verdict.problems[k].begin(),
                          verdict.problems[k].end());
      if (!verdict.problems[k].empty()) row.health = "FAILED";
      if (verdict.send_gbps[k] > 0) row.net_out = fmt::format("{:.2f}", verdict.send_gbps[k]);
      if (verdict.receive_gbps[k] > 0) row.net_in = fmt::format("{:.2f}", verdict.receive_gbps[k]);
    }
    bandwidth = "\n" + verdict.summary;
  }
  if (!net.chosen.empty()) {
    std::string iface;
    for (const auto& c : net.candidates) {
      if (c.address == net.chosen && !c.interface.empty()) iface = " (" + c.interface + ")";
    }
    return {fmt::format("network: every node reaches node 0 ({}) at {}{}{}", node0, net.chosen,
                        iface, bandwidth),
            true};
  }
  if (all_reach_some && !net.problems.empty()) return {"network: " + net.problems.front(), false};
  return {"", false};  // the nodes that reach none say so in their own lines
}

}  // namespace

StartCells start_cells(const HostEntry& host, const std::string& agent,
                       const Controller::NodeCheck& check) {
  StartCells row;
  const std::string& stage = check.start.failed_stage;
  const bool hello = check.hello.has_value();
  // The transport ran (the node reached, logged in): the agent was missing
  // there, or said Hello.
  const bool reached = hello || stage == "agent";
  if (host.on_head_machine()) {
    row.connect = row.hostkey = row.auth = "local";
  } else if (host.transport != Transport::kSsh) {
    row.hostkey = row.auth = "-";
    row.connect =
        reached ? (host.transport == Transport::kSlurm ? "srun" : transport_name(host.transport))
                : "FAILED";
  } else if (host.ssh_client == SshClient::kOpenssh) {
    row.hostkey = row.auth = "ssh";
    row.connect = reached ? "openssh" : "FAILED";
  } else if (reached || stage == "exec") {
    row.connect = row.hostkey = row.auth = "ok";
  } else {
    const bool connected = stage == "hostkey" || stage == "auth";
    row.connect = connected ? "ok" : "FAIL";
    row.hostkey = stage == "hostkey" ? "FAIL" : connected ? "ok" : "-";
    row.auth = stage == "auth" ? "FAIL" : "-";
  }
  if (hello) {
    const proto::Hello& h = *check.hello;
    if (h.version != proto::kProtocolVersion || h.agent_version != kVersion) {
      row.agent = "VERSION";
      row.problems.push_back(fmt::format(
          "'{}' reports \"dlaunch-agent {} (protocol {})\", dlaunch wants \"dlaunch-agent {} "
          "(protocol {})\"",
          agent, h.agent_version, h.version, kVersion, proto::kProtocolVersion));
    } else if (check.start.copied) {
      row.agent = "copy";  // none usable was there: copied, as the job would
    } else if (h.exe.find("/.cache/dlaunch/") != std::string::npos) {
      row.agent = "cached";  // copied there by an earlier job
    } else {
      row.agent = "ok";
    }
  } else if (stage == "agent") {
    row.agent = "MISSING";
    row.problems.push_back(fmt::format("dlaunch-agent not found or not executable at '{}'", agent));
  } else if (!check.failed.empty()) {
    row.problems.push_back(check.failed);
  } else {
    row.problems.emplace_back("its agent did not answer (no Hello)");
  }
  return row;
}

PreflightReport check_nodes(const JobPlan& plan, const PreflightOptions& o) {
  std::vector<Row> rows(plan.nodes.size());
  for (std::size_t i = 0; i < plan.nodes.size(); ++i) {
    const auto& host = plan.nodes[i].host;
    Row& row = rows[i];
    row.node = std::to_string(plan.nodes[i].node_rank);
    row.name = host.name;
    row.host = host.on_head_machine() ? host.host + " (local)"
               : host.transport != Transport::kSsh
                   ? host.host + " (" + transport_name(host.transport) + ")"
                   : (host.user.empty() ? "" : host.user + "@") + host.host +
                         (host.port == 22 ? "" : ":" + std::to_string(host.port));
    row.contained = !host.container.empty() || !o.container.image.empty();
  }
  // The job stopped at Ready: every node reached and its agent started as
  // the job does them; the working directory, the programs and scripts, the
  // node's facts; then, when every node passed and the job spans machines,
  // the network, as a job would test it at start.
  const bool master_addr_explicit =
      !plan.nodes.empty() && plan.master_addr != default_master_addr(plan.nodes.front().host);
  const bool probe = net::probe_wanted(plan, master_addr_explicit, true);
  const auto [network, network_ok] = check_with_agents(plan, o, master_addr_explicit, probe, rows);
  judge_health(plan, o, rows);

  const std::vector<std::string> head = {"NODE",   "NAME",  "HOST",  "CONNECT", "HOSTKEY",
                                         "AUTH",   "AGENT", "WDIR",  "PROGRAM", "GPUS",
                                         "HEALTH", "REACH", "RESULT"};
  std::vector<std::vector<std::string>> table;
  int failed = 0;
  for (const auto& r : rows) {
    const bool ok = r.problems.empty();
    failed += ok ? 0 : 1;
    table.push_back({r.node, r.name, r.host, r.connect, r.hostkey, r.auth, r.agent, r.wdir,
                     r.program, r.gpus, r.health, r.reach, ok ? "ok" : "FAILED"});
  }
  PreflightReport report;
  report.exit_code = failed == 0 && network_ok ? 0 : 1;
  for (const auto& r : rows) {
    report.nodes.push_back({.name = r.name, .ok = r.problems.empty(), .problems = r.problems});
  }
  std::string& text = report.text;
  if (o.json) {
    print_json(text, rows, network, network_ok, failed);
    return report;
  }
  print_table(text, head, table);
  // The figures behind HEALTH, for the nodes that gave them.
  std::vector<std::vector<std::string>> figures;
  for (const auto& r : rows) {
    if (r.facts.empty()) continue;
    const auto s = health::summarize(r.facts, r.clock);
    figures.push_back({r.node, r.name, s.kernel, s.load, s.mem, s.wdir, s.tmp, s.nofile, s.clock,
                       s.gpus, s.driver, s.ib, s.xid, r.net_out, r.net_in});
  }
  if (!figures.empty()) {
    text += "\n";
    print_table(text,
                {"NODE", "NAME", "KERNEL", "LOAD/CPUS", "MEM_AVAIL", "WDIR_FREE", "TMP_FREE",
                 "NOFILE", "CLOCK", "GPUS", "DRIVER/CUDA", "IB", "XID", "NET_OUT", "NET_IN"},
                figures);
  }
  for (const auto& r : rows) {
    if (!r.topology.empty())
      text += fmt::format("node {} ({}): topology: {}\n", r.node, r.name, r.topology);
  }
  for (const auto& r : rows) {
    for (const auto& p : r.problems) text += fmt::format("node {} ({}): {}\n", r.node, r.name, p);
  }
  if (!network.empty()) text += network + "\n";
  text += fmt::format("{} of {} node(s) passed\n", rows.size() - static_cast<std::size_t>(failed),
                      rows.size());
  return report;
}

}  // namespace dlaunch
