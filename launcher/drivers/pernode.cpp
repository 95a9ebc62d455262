#include "drivers/pernode.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <thread>

#include <boost/asio/post.hpp>
#include <fmt/format.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "cli/controller_config.h"
#include "controller/controller.h"
#include "dlaunch/clock.h"
#include "dlaunch/private_dir.h"
#include "dlaunch/process.h"
#include "dlaunch/random.h"
#include "dlaunch/text.h"
#include "dlaunch/tunables.h"
#include "drivers/attempts.h"
#include "drivers/local_inputs.h"
#include "jobs/report.h"
#include "net/master_address.h"
#include "output/console_style.h"
#include "output/output_sink.h"
#include "pernode/rendezvous.h"
#include "pernode/store_fence.h"
#include "plan/user_env.h"
#include "transport/link_factory.h"
#include "transport/local_transport.h"

namespace dlaunch {

namespace {

std::string getenv_or(const std::vector<std::string>& env, const std::string& name) {
  for (const auto& e : env) {
    if (e.size() > name.size() && e.compare(0, name.size(), name) == 0 && e[name.size()] == '=')
      return e.substr(name.size() + 1);
  }
  return {};
}

void set_env(EnvList& env, const std::string& k, const std::string& v) {
  for (auto& [name, value] : env) {
    if (name == k) {
      value = v;
      return;
    }
  }
  env.emplace_back(k, v);
}

// A failure of this node, for the others' reports: a failed rank travels
// whole (they print the report a head would, and exit with its status).
std::string encode_cause(const RootCause& c, const std::string& me, int node_rank) {
  if (c.kind != CauseKind::kWorker) {
    return fmt::format("node {} ({}) failed: {}", node_rank, me,
                       printable(format_report("", c, 0).substr(0, 2000)));
  }
  const auto& e = c.exit;
  std::string out =
      fmt::format("worker\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}", e.rank, e.pid,
                  static_cast<int>(e.kind), e.code, e.signal, e.runtime_ms, printable(e.message),
                  printable(c.node), c.local_rank, node_rank, printable(me));
  for (const auto& l : c.stderr_tail) out += "\n" + l;
  return out;
}

// `here`: what became of this node's ranks, for the note (empty: none, the
// report says it another way).
RootCause decode_cause(const std::string& payload, const std::string& here) {
  RootCause c;
  std::vector<std::string> f;
  std::size_t start = 0;
  for (;;) {
    const auto at = payload.find('\n', start);
    f.push_back(payload.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) break;
    start = at + 1;
  }
  // Another launcher's words, from the network: every number bounded, every
  // text made printable, anything else a failure said as it is (escaped).
  const auto number = [&](std::size_t i, long long lo, long long hi) -> std::optional<long long> {
    long long n = 0;
    const std::string& v = f[i];
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (ec != std::errc() || end != v.data() + v.size() || n < lo || n > hi) return std::nullopt;
    return n;
  };
  const bool worker = f.size() >= 12 && f[0] == "worker";
  const auto rank = worker ? number(1, 0, limits::kMaxRanksPerJob - 1) : std::nullopt;
  const auto pid = worker ? number(2, 0, INT32_MAX) : std::nullopt;
  const auto kind = worker ? number(3, 1, 4) : std::nullopt;
  const auto code = worker ? number(4, INT32_MIN, INT32_MAX) : std::nullopt;
  const auto sig = worker ? number(5, 0, 128) : std::nullopt;
  const auto runtime = worker ? number(6, 0, INT64_MAX) : std::nullopt;
  const auto local = worker ? number(9, 0, limits::kMaxRanksPerNode - 1) : std::nullopt;
  if (!rank || !pid || !kind || !code || !sig || !runtime || !local) {
    c.kind = CauseKind::kNode;
    c.message = printable(payload.substr(0, 4000));
    return c;
  }
  c.kind = CauseKind::kWorker;
  c.exit.rank = static_cast<std::int32_t>(*rank);
  c.exit.pid = static_cast<std::int32_t>(*pid);
  c.exit.kind = static_cast<proto::ExitKind>(*kind);
  c.exit.code = static_cast<std::int32_t>(*code);
  c.exit.signal = static_cast<std::int32_t>(*sig);
  c.exit.runtime_ms = static_cast<std::uint64_t>(*runtime);
  c.exit.message = printable(f[7]);
  c.node = printable(f[8]);
  c.local_rank = static_cast<int>(*local);
  for (auto it = f.begin() + 12; it != f.end(); ++it) c.stderr_tail.push_back(printable(*it));
  f[10] = printable(f[10]);
  f[11] = printable(f[11]);
  c.notes.push_back(fmt::format("the failed rank ran under node {}'s launcher ({}){}", f[10], f[11],
                                here.empty() ? "" : "; " + here));
  return c;
}

}  // namespace

std::vector<std::string> mpi_node_names(const std::vector<std::string>& launchers) {
  // A launcher is named "host pid N": the host is what MPI should show, as
  // long as it tells the nodes apart (several launchers on one machine).
  std::vector<std::string> hosts;
  for (const auto& l : launchers) {
    std::string h = l.substr(0, l.find(" pid "));
    // PMIx's node map is a comma-separated list: keep its syntax out.
    for (char& c : h) {
      if (std::isalnum(static_cast<unsigned char>(c)) == 0 && c != '-' && c != '.') c = '-';
    }
    hosts.push_back(h.empty() ? "node" : h);
  }
  auto sorted = hosts;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    for (std::size_t k = 0; k < hosts.size(); ++k) hosts[k] += fmt::format("-node{}", k);
  }
  return hosts;
}

std::string rendezvous_key(const std::string& secret, const std::string& run_id) {
  const std::string msg = "dlaunch-rendezvous-key\n" + run_id;
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
           reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), mac, &len) == nullptr) {
    throw Error(ErrorKind::kInternal, "HMAC-SHA256 failed");
  }
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) hex += fmt::format("{:02x}", mac[i]);
  return hex;
}

RdzvConf parse_rdzv_conf(const std::string& text) {
  RdzvConf c;
  if (text.empty()) return c;
  std::size_t start = 0;
  while (start <= text.size()) {
    auto end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    const auto eq = item.find('=');
    const std::string k = item.substr(0, eq);
    const std::string v = eq == std::string::npos ? "" : item.substr(eq + 1);
    const auto seconds = [&](double& out) {
      char* e = nullptr;
      const double x = std::strtod(v.c_str(), &e);
      if (v.empty() || *e != '\0' || !std::isfinite(x) || x <= 0) {
        throw InputError({"--rdzv-conf"}, k, "expected a number of seconds > 0, got '" + v + "'");
      }
      out = x;
    };
    if (k == "join_timeout") {
      seconds(c.join_timeout_s);
    } else if (k == "last_call_timeout") {
      seconds(c.last_call_timeout_s);
    } else if (k == "close_timeout") {
      seconds(c.close_timeout_s);
    } else if (k == "read_timeout" || k == "timeout") {
      seconds(c.read_timeout_s);
    } else if (k == "secret") {
      if (v.empty()) throw InputError({"--rdzv-conf"}, k, "the secret is empty");
      c.secret = v;
    } else if (k == "insecure") {
      c.insecure = v == "1" || v == "true" || v == "True" || v == "yes";
    } else if (k == "is_host") {
      throw InputError({"--rdzv-conf"}, k,
                       "is_host is not needed: the launcher that can bind the endpoint hosts",
                       "leave it out");
    } else {
      throw InputError({"--rdzv-conf"}, k, "unknown key '" + k + "'",
                       "known: join_timeout, last_call_timeout, close_timeout, read_timeout, "
                       "secret, insecure");
    }
  }
  return c;
}

int resolve_nproc(const std::string& spec, const std::vector<std::string>& env) {
  const auto cpus = [] {
    return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  };
  const auto gpus = [&] {
    const std::string visible = getenv_or(env, "CUDA_VISIBLE_DEVICES");
    if (!visible.empty())
      return static_cast<int>(std::count(visible.begin(), visible.end(), ',')) + 1;
    int n = 0;
    std::error_code ec;
    for (const auto& d : std::filesystem::directory_iterator("/dev", ec)) {
      const std::string name = d.path().filename().string();
      if (name.size() > 6 && name.starts_with("nvidia") &&
          name.find_first_not_of("0123456789", 6) == std::string::npos)
        ++n;
    }
    return n;
  };
  if (spec == "cpu") return cpus();
  if (spec == "xpu") {
    // Intel GPUs: DRM render nodes of vendor 0x8086 (ZE_AFFINITY_MASK, when
    // set, says which of them the ranks may use).
    const std::string mask = getenv_or(env, "ZE_AFFINITY_MASK");
    if (!mask.empty()) return static_cast<int>(std::count(mask.begin(), mask.end(), ',')) + 1;
    int n = 0;
    std::error_code ec;
    for (const auto& d : std::filesystem::directory_iterator("/sys/class/drm", ec)) {
      const std::string name = d.path().filename().string();
      if (name.rfind("renderD", 0) != 0) continue;
      std::ifstream vendor(d.path() / "device/vendor");
      std::string v;
      if (vendor >> v && v == "0x8086") ++n;
    }
    if (n > 0) return n;
    throw InputError({"--nproc-per-node"}, "",
                     "xpu: this machine has no Intel GPU (no DRM render node of vendor 0x8086, no "
                     "ZE_AFFINITY_MASK)",
                     "give a number, or cpu");
  }
  if (spec == "gpu" || spec == "auto") {
    const int n = gpus();
    if (n > 0) return n;
    if (spec == "auto") return cpus();
    throw InputError({"--nproc-per-node"}, "",
                     "gpu: this machine has no GPU (no /dev/nvidiaN, "
                     "no CUDA_VISIBLE_DEVICES)",
                     "give a number, or cpu");
  }
  return std::atoi(spec.c_str());
}

JobPlan make_node_plan(const PlanOptions& po, const Membership& m, const std::string& node_name,
                       const std::string& role, const std::string& store_secret) {
  Hostfile hf = local_hostfile(m.nproc);
  hf.source = "--nproc-per-node";
  hf.hosts.front().name = node_name;
  JobPlan plan = make_plan(hf, po);
  const int offset = m.node_rank * m.nproc;
  const int world = m.nnodes * m.nproc;
  plan.world_size = world;
  plan.master_addr = m.master_addr;
  NodePlan& node = plan.nodes.front();
  node.node_rank = m.node_rank;
  // TORCHELASTIC_USE_AGENT_STORE and TORCH_NCCL_ASYNC_ERROR_HANDLING come
  // from make_plan, as in the head-node mode.
  // The job's comm store is the rendezvous store, hosted by one launcher.
  set_env(node.env, "DLAUNCH_STORE_ADDR", m.store_host);
  set_env(node.env, "DLAUNCH_STORE_PORT", std::to_string(m.store_port));
  set_env(node.env, "DLAUNCH_STORE_SECRET", store_secret);
  plan.nnodes = m.nnodes;
  // One role, the whole job's ranks (as torchrun gives them).
  for (auto& app : plan.apps) {
    app.role = role;
    app.role_world_size = world;
  }
  for (auto& r : node.ranks) {
    r.rank += offset;
    r.role_rank = r.rank;
  }
  return plan;
}

namespace {

struct RoundEnd {
  int status = 0;
  bool final = false;    // the failure was one no restart can help
  bool joining = false;  // the round ended for a node waiting to join
};

RoundEnd run_round(const Options& o, Rendezvous& rdzv, const RdzvSettings& rs, const Membership& m,
                   int round, const std::vector<std::string>& head_env, const std::string& here) {
  const PerNodeOptions& p = o.pernode;
  const std::string workdir =
      o.workdir.empty() ? std::filesystem::current_path().string() : o.workdir;
  const std::string agent = o.agent_path.empty() ? default_agent_path() : o.agent_path;
  if (o.prefix != PrefixMode::kNone && std::getenv("DLAUNCH_QUIET") == nullptr) {
    write_all(2, fmt::format("dlaunch: node {} of {} ({} ranks each, ranks {}-{}), MASTER_ADDR={} "
                             "MASTER_PORT={}{}{}\n",
                             m.node_rank, m.nnodes, m.nproc, m.node_rank * m.nproc,
                             (m.node_rank + 1) * m.nproc - 1, m.master_addr,
                             m.master_port != 0 ? std::to_string(m.master_port)
                                                : std::string("<a free port its agent reserves>"),
                             m.hosting ? ", hosting the rendezvous" : "",
                             round > 0 ? fmt::format(", restart {}", round) : ""));
  }

  PlanOptions po;
  po.job_id = rs.run_id;
  po.master_addr = m.master_addr;
  po.command = o.command;
  po.head_env = head_env;
  po.user_env = user_environment(o.env_files, o.exports, po.head_env);
  po.max_restarts = o.max_restarts;
  po.restart_count = round;
  po.collective_timeout_s = o.collective_timeout_s;
  po.virtual_local_rank = o.pernode.virtual_local_rank;
  const JobPlan plan = make_node_plan(po, m, here, p.role, rs.secret);
  std::vector<std::string> node_of_rank(static_cast<std::size_t>(plan.world_size));
  for (std::size_t i = 0; i < node_of_rank.size(); ++i)
    node_of_rank[i] = m.names[i / static_cast<std::size_t>(m.nproc)];
  for (const auto& r : plan.nodes.front().ranks)
    node_of_rank[static_cast<std::size_t>(r.rank)] = here;
  std::vector<int> shown;
  if (!p.local_ranks_filter.empty()) {
    for (int local : parse_rank_list(p.local_ranks_filter, m.nproc))
      shown.push_back(m.node_rank * m.nproc + local);
  }
  const auto color = o.color;
  const char* no_color = std::getenv("NO_COLOR");
  const char* term = std::getenv("TERM");
  // torchrun's --redirects: those streams of those local ranks go to the
  // files only.
  std::map<int, int> redirected;
  if (!p.redirects.empty()) {
    const auto spec = parse_std_spec(p.redirects, "--redirects");
    for (int lr = 0; lr < m.nproc; ++lr) {
      const auto it = spec.count(lr) != 0 ? spec.find(lr) : spec.find(-1);
      if (it != spec.end() && it->second != 0) redirected[m.node_rank * m.nproc + lr] = it->second;
    }
  }
  OutputSink sink(
      {.prefix = o.prefix,
       .output_dir = o.output_dir,
       // A restart's files go to a folder of its own.
       .job_id = round == 0 ? plan.job_id : fmt::format("{}-restart{}", plan.job_id, round),
       .node_of_rank = std::move(node_of_rank),
       .ranks = shown,
       .redirected = std::move(redirected),
       .timestamps = o.timestamps,
       .color_stdout = color_enabled(color, ::isatty(1) == 1, no_color, term),
       .color_stderr = color_enabled(color, ::isatty(2) == 1, no_color, term)});
  ControllerConfig config = controller_config(o);
  config.agent_path = agent;
  config.workdir = workdir;
  config.master_port = m.master_port;
  config.reserve_master_port = m.node_rank == 0;
  config.master_addr_explicit = true;
  // Launchers that meet at a loopback address are all on this machine; else
  // the ranks get the interface toward MASTER_ADDR (gloo, NCCL, Open MPI),
  // as the head-node mode gives them across hosts.
  config.spans_machines = m.nnodes > 1 && !net::is_loopback_address(m.master_addr);
  // No store of the node's own: the rendezvous store is the job's. This
  // launcher's machine is its node's alone (torchrun's assumption): its agent
  // places the ranks (--bind-to) from the first CPU.

  boost::asio::io_context io;
  AsioClock clock(io);
  TransportLinks links(io, {});
  // --mpi: this node's PMIx server is told the whole job, and its fences meet
  // the other launchers' in the rendezvous store.
  std::optional<StoreFence> fences;
  if (o.mpi) {
    config.mpi = true;
    config.mpi_node_names = mpi_node_names(m.names);
    config.mpi_ranks_per_node.assign(static_cast<std::size_t>(m.nnodes), m.nproc);
    // One request's answer, and a reconnect: a fence's wait for the other
    // nodes is a parked request of its own (StoreFenceOptions::wait).
    fences.emplace(
        rdzv.connect_async(io, std::chrono::seconds(2)),
        StoreFenceOptions{
            .prefix = rdzv.round_prefix(), .nnodes = m.nnodes, .node_rank = m.node_rank});
  }
  // The bridge between this node's job and the others': a failure here is
  // published for them at once; theirs stops this node.
  bool published = false;
  std::optional<PeerFailure> peer;
  const auto publish = [&](const RootCause& c) {
    if (peer || published) return;  // the others' failure, or said already
    published = true;
    rdzv.publish_failure(encode_cause(c, rs.me, m.node_rank), exit_status(c), !allows_restart(c));
  };
  // The job's observer (jobs/job_observer.h) that hears its cause first.
  struct Publisher final : JobObserver {
    std::function<void(const RootCause&)> publish;
    void on_cause(const RootCause& c) override { publish(c); }
  } publisher;
  publisher.publish = publish;
  Controller controller(plan, config, sink,
                        {.io = io,
                         .links = links,
                         .clock = clock,
                         .fences = fences ? &*fences : nullptr,
                         .agreed_cause = [&]() -> std::optional<RootCause> {
                           if (peer || !published) return std::nullopt;
                           auto f = rdzv.agreed_failure(std::chrono::milliseconds(1000));
                           if (!f) return std::nullopt;
                           peer = f;
                           // This node's own failure goes in a note of its own.
                           return decode_cause(f->message, "");
                         },
                         .observers = {&publisher}});
  rdzv.start_watch(io, clock);
  // The watch ends with this round's loop, whatever ends the round.
  struct StopWatch {
    Rendezvous& r;
    ~StopWatch() { r.stop_watch(); }
  } stop_watch{rdzv};
  // Another node's failure, the moment the watch sees it (on this loop,
  // from inside the rendezvous: handled after it returns).
  const auto take_peer_failure = [&] {
    if (controller.finished() || peer || published) return;
    if (auto f = rdzv.peer_failure()) {
      peer = f;
      RootCause c = decode_cause(f->message, "this node's ranks were stopped");
      c.for_restart = f->joining;
      controller.peer_failed(std::move(c));
    }
  };
  rdzv.on_peer_failure([&io, &take_peer_failure] { boost::asio::post(io, take_peer_failure); });
  int status = controller.run();
  rdzv.on_peer_failure(nullptr);
  if (controller.cause().kind != CauseKind::kNone) publish(controller.cause());
  RoundEnd end;
  end.joining = peer && peer->joining;
  end.final = (peer && peer->final) || (!peer && !allows_restart(controller.cause()));
  // Every launcher exits as the job's head would: with the failing rank's
  // status, wherever it ran.
  if (peer && controller.cause().kind != CauseKind::kInterrupted) status = peer->status;
  end.status = status;
  return end;
}

}  // namespace

int run_per_node(const Options& given) {
  Options o = given;
  const PerNodeOptions& p = o.pernode;
  // torchrun's --redirects/--tee without --log-dir write to a folder of their
  // own (torchrun's is a temporary one too): said, so that it can be found.
  if (o.output_dir.empty() &&
      ((!p.redirects.empty() && p.redirects != "0") || (!p.tee.empty() && p.tee != "0"))) {
    o.output_dir = make_private_dir(runtime_base_dir(), "dlaunch-logs-");
    write_all(2, fmt::format("dlaunch: --redirects/--tee without --log-dir: the ranks' output "
                             "files are under {}\n",
                             o.output_dir));
  }
  if (o.command.empty()) {
    throw InputError({}, "", "no program to run", "dlaunch --nnodes N [options] PROGRAM [ARGS...]");
  }
  if (!o.job_id.empty() && p.rdzv_id != "none") {
    throw InputError({"--job-id"}, "", "--job-id and --rdzv-id both given", "use --rdzv-id");
  }
  std::string run_id = o.job_id.empty() ? p.rdzv_id : o.job_id;
  // A job of one node has nobody to agree an id with: its own (torchrun's
  // --standalone makes a uuid), so that jobs on one machine never share one.
  const bool one_node = p.standalone || p.max_nodes == 1;
  if (one_node && run_id == "none") run_id = "standalone-" + random_hex(6);
  if (!is_job_id(run_id)) {
    throw InputError({"--rdzv-id"}, "", "'" + run_id + "' is not a valid job id",
                     "use 1-64 letters, digits, '.', '_' or '-'");
  }
  const auto head_env = current_environment();
  const RdzvConf conf = parse_rdzv_conf(p.rdzv_conf);
  const int nproc = resolve_nproc(p.nproc, head_env);

  RdzvSettings rs;
  rs.is_static = p.rdzv_backend == "static";
  rs.run_id = run_id;
  rs.min_nodes = p.min_nodes;
  rs.max_nodes = p.max_nodes;
  rs.node_rank = p.node_rank;
  rs.nproc = nproc;
  rs.local_addr = p.local_addr;
  rs.join_timeout = option_ms(conf.join_timeout_s);
  rs.last_call = option_ms(conf.last_call_timeout_s);
  rs.read_timeout = option_ms(conf.read_timeout_s);
  rs.close_timeout = option_ms(conf.close_timeout_s);
  rs.max_restarts = o.max_restarts;
  rs.store_port = static_cast<std::uint16_t>(o.store_port);
  rs.pinned_master_port = static_cast<std::uint16_t>(
      pinned_master_port(user_environment(o.env_files, o.exports, head_env)));
  rs.mpi = o.mpi;
  rs.heartbeat_timeout = option_ms(o.heartbeat_timeout_s);
  const std::string here = host_name();
  rs.me = fmt::format("{} pid {}", here, ::getpid());
  // One node and no meeting point given (torchrun --nproc-per-node 4
  // train.py): nobody to meet, a free loopback port, as --standalone.
  const bool alone = p.standalone || (rs.is_static && p.max_nodes == 1 && !p.master_port_given &&
                                      !p.master_addr_given);
  if (alone) {
    rs.host = "127.0.0.1";
    rs.port = 0;  // any free port
  } else if (rs.is_static) {
    rs.host = o.master_addr.empty() ? "127.0.0.1" : o.master_addr;
    rs.port = static_cast<std::uint16_t>(o.master_port > 0 ? o.master_port : 29500);
  } else {
    std::string ep = p.rdzv_endpoint;
    std::string port = "29400";
    if (!ep.empty() && ep.front() == '[') {
      const auto close = ep.find(']');
      if (close == std::string::npos) {
        throw InputError({"--rdzv-endpoint"}, "", "'" + ep + "': no closing ']'");
      }
      if (close + 1 < ep.size() && ep[close + 1] == ':') port = ep.substr(close + 2);
      ep = ep.substr(1, close - 1);
    } else if (const auto colon = ep.rfind(':');
               colon != std::string::npos && ep.find(':') == colon) {
      port = ep.substr(colon + 1);
      ep = ep.substr(0, colon);
    }
    char* end = nullptr;
    const long n = std::strtol(port.c_str(), &end, 10);
    // HOST:0, torchrun's "a free port": only a launcher alone can use it (no
    // other could learn which port it got).
    if (n == 0 && port == "0" && !ep.empty() && p.max_nodes > 1) {
      throw InputError({"--rdzv-endpoint"}, "",
                       "'" + p.rdzv_endpoint +
                           "': port 0 is a free port only this launcher "
                           "would know, and --nnodes " +
                           p.nnodes + " needs others to meet it",
                       "give the port every launcher is told, e.g. " + ep + ":29400");
    }
    if (ep.empty() || port.empty() || *end != '\0' || n < 0 || n > 65535 ||
        (n == 0 && port != "0")) {
      throw InputError({"--rdzv-endpoint"}, "",
                       "'" + p.rdzv_endpoint + "' is not HOST[:PORT] with a port from 1 to 65535");
    }
    rs.host = ep;
    rs.port = static_cast<std::uint16_t>(n);
  }
  std::string user_secret = conf.secret;
  if (user_secret.empty()) user_secret = getenv_or(head_env, "DLAUNCH_RDZV_SECRET");
  if (!user_secret.empty() && !conf.insecure) {
    if (user_secret.size() < kMinRdzvSecretBytes) {
      throw InputError(
          {conf.secret.empty() ? "DLAUNCH_RDZV_SECRET" : "--rdzv-conf"}, "secret",
          fmt::format("the rendezvous secret is {} characters: too short to resist guessing "
                      "(at least {})",
                      user_secret.size(), kMinRdzvSecretBytes),
          "use a random value, the same on every node, e.g. `openssl rand -hex 32`");
    }
    // The launchers' and workers' key: the user's secret never leaves this
    // process, and jobs that share one secret still have keys of their own.
    rs.secret = rendezvous_key(user_secret, run_id);
  } else if (alone) {
    // Nobody to meet: loopback only, a key of its own.
    rs.secret = random_hex(32);
  } else {
    // No secret (torchrun's command line as it is), or insecure=1: an open
    // rendezvous, as torchrun's TCPStore is. Its key is public, so it
    // authenticates nothing; what the launchers read from it is checked as
    // any input from the network, and it is said once, loudly.
    rs.secret = kOpenRendezvousKey;
    rs.authenticated = false;
  }

  // What can be checked here is checked before meeting anyone.
  const std::string workdir =
      o.workdir.empty() ? std::filesystem::current_path().string() : o.workdir;
  const std::string agent = o.agent_path.empty() ? default_agent_path() : o.agent_path;
  require_agent_here(agent, {"--agent"}, "");
  require_directory_here(workdir, {"--wdir"}, "");
  // In a container the agent looks for it in the image (agent/runtime/).
  if (o.container.image.empty()) require_program_here(o.command.front(), head_env, workdir, {});

  Rendezvous rdzv(rs);
  // --max-restarts: a failure anywhere (a rank, a lost node) stops every
  // node; the launchers that remain meet again in the next round and start
  // the job with the nodes there are (at least MIN), up to N times.
  int round = 0;  // the rendezvous's (a launcher joining a running job starts in its next)
  AttemptHooks hooks;
  hooks.run = [&](int /*attempt*/) {
    const Membership m = rdzv.join(round);
    round = m.round;
    const RoundEnd end = run_round(o, rdzv, rs, m, round, head_env, here);
    ++round;
    int status = end.status;
    const bool joining = status != 0 && end.joining;
    bool final = end.final;
    if (status == 0) {
      // This node's ranks succeeded: the job has not, until every node's
      // have. A failure elsewhere meanwhile is the job's, and a restart
      // takes this node in as well (the ranks of a job restart together).
      if (const auto f = rdzv.finish_succeeded()) {
        const RootCause c = decode_cause(f->message, "");
        write_all(2, "dlaunch: this node's ranks had finished when another node failed\n" +
                         format_report(run_id, c, 0));
        status = f->status == 0 ? 1 : f->status;
        final = f->final;
      }
    }
    return AttemptEnd{
        .status = status, .restartable = !final && !rdzv.store_lost(), .joining = joining};
  };
  hooks.decided = [&](bool last) { rdzv.finish(last); };
  hooks.finish = [](const std::string& last, const AttemptLog& attempts) {
    write_all(2, attempts.summary(last));
  };
  hooks.restarting_suffix = " with the nodes that remain";
  return run_attempts(o.max_restarts, hooks);
}

}  // namespace dlaunch
