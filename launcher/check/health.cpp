#include "check/health.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>

#include <fmt/format.h>

#include "hostfile/hostfile.h"

namespace dlaunch::health {
namespace {

struct Named {
  const char* name;
  double Thresholds::*field;
};
constexpr Named kNames[] = {
    {"free_gb", &Thresholds::free_gb},
    {"mem_available_gb", &Thresholds::mem_available_gb},
    {"load_per_cpu", &Thresholds::load_per_cpu},
    {"nofile", &Thresholds::nofile},
    {"memlock_mb", &Thresholds::memlock_mb},
    {"gpu_temp_c", &Thresholds::gpu_temp_c},
    {"ecc_volatile", &Thresholds::ecc_volatile},
    {"ecc_aggregate", &Thresholds::ecc_aggregate},
    {"clock_offset_s", &Thresholds::clock_offset_s},
    {"ib_link_downed", &Thresholds::ib_link_downed},
    {"xid_window_h", &Thresholds::xid_window_h},
    {"net_ratio", &Thresholds::net_ratio},
    {"net_gbps", &Thresholds::net_gbps},
    {"gpu_test_mb", &Thresholds::gpu_test_mb},
    {"gpu_mem_ratio", &Thresholds::gpu_mem_ratio},
};

// Thresholds that judge the nodes together (or say what every node runs):
// set for the job, never for one host.
bool jobs_threshold(const std::string& name) {
  return name == "net_ratio" || name == "net_gbps" || name == "gpu_test_mb" ||
         name == "gpu_mem_ratio";
}

// XIDs that mean the GPU or its memory needs a reset or the node a reboot
// (NVIDIA's XID catalogue: double-bit ECC, page retirement and row
// remapping, NVLink, fallen off the bus, contained and uncontained ECC, GSP).
const std::set<int> kFatalXids = {48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120};

// "a,b,c" -> {"a", "b", "c"}; "" -> {}.
std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start < text.size()) {
    const auto comma = text.find(',', start);
    const auto stop = comma == std::string::npos ? text.size() : comma;
    out.push_back(text.substr(start, stop - start));
    start = stop + 1;
  }
  return out;
}

const std::string* find(const Facts& f, const std::string& key) {
  const auto it = f.find(key);
  return it == f.end() ? nullptr : &it->second;
}

// The fact as a number; false when absent or not one ("unknown", "n/a", an error).
bool number(const Facts& f, const std::string& key, double& out) {
  const std::string* v = find(f, key);
  if (v == nullptr || v->empty()) return false;
  char* end = nullptr;
  out = std::strtod(v->c_str(), &end);
  return end != v->c_str() && *end == '\0';
}

std::string show(double v) { return fmt::format("{:g}", v); }

// Each device index the facts mention under `prefix` ("gpu.": NVML's,
// "cuda.": the GPU test's), in order.
std::vector<std::string> indices(const Facts& f, const std::string& prefix) {
  std::set<int> seen;
  for (const auto& [k, v] : f) {
    if (k.rfind(prefix, 0) == 0) seen.insert(std::atoi(k.c_str() + prefix.size()));
  }
  std::vector<std::string> out;
  out.reserve(seen.size());
  for (const int i : seen) out.push_back(std::to_string(i));
  return out;
}

// "CUDA device 1 (PCI 0000:3b:00.0)".
std::string cuda_device(const Facts& f, const std::string& i) {
  const auto it = f.find("cuda." + i + ".pci");
  return "CUDA device " + i + (it == f.end() ? "" : " (PCI " + it->second + ")");
}

// The GPU test's facts, where it ran (health/gpu_test.h): a device whose
// memory read back wrong, whose kernels computed wrong, or that failed a
// call; a node whose NVML sees GPUs and where the test could not run.
void judge_gpu_test(const Facts& f, std::vector<std::string>& out) {
  const std::string* cuda = find(f, "cuda");
  if (cuda == nullptr) return;  // not run: --check=quick, or no GPU
  if (*cuda != "loaded") {
    out.push_back("the GPU test could not run: " + *cuda);
    return;
  }
  for (const auto& i : indices(f, "cuda.")) {
    for (const char* test : {"memtest", "compute"}) {
      const std::string* v = find(f, "cuda." + i + "." + test);
      if (v == nullptr || *v == "ok") continue;
      out.push_back(fmt::format("{}: {} test: {}", cuda_device(f, i),
                                std::string(test) == "memtest" ? "memory" : "compute", *v));
    }
  }
}

// Each InfiniBand port ("mlx5_0/1") the facts mention.
std::vector<std::string> ib_ports(const Facts& f) {
  std::set<std::string> seen;
  for (const auto& [k, v] : f) {
    if (k.rfind("ib.", 0) != 0) continue;
    const auto dot = k.rfind('.');
    if (dot > 3) seen.insert(k.substr(3, dot - 3));
  }
  return {seen.begin(), seen.end()};
}

void judge_free(const Facts& f, const std::string& key, const std::string& where,
                const Thresholds& t, std::vector<std::string>& out) {
  double mb = 0;
  if (number(f, key, mb) && mb < t.free_gb * 1024) {
    out.push_back(fmt::format("only {} MB free in {} (threshold free_gb={})", show(mb), where,
                              show(t.free_gb)));
  }
}

void judge_gpu(const Facts& f, const std::string& i, const Thresholds& t,
               std::vector<std::string>& out) {
  const std::string k = "gpu." + i + ".";
  for (const auto& [key, value] : f) {
    if (key.rfind(k, 0) == 0 && value.rfind("error", 0) == 0) {
      out.push_back(fmt::format("GPU {}: {} {}", i, key.substr(k.size()), value));
    }
  }
  double v = 0;
  if (number(f, k + "temp_c", v) && v > t.gpu_temp_c) {
    out.push_back(
        fmt::format("GPU {} at {} C (threshold gpu_temp_c={})", i, show(v), show(t.gpu_temp_c)));
  }
  if (number(f, k + "ecc_volatile_uncorrected", v) && v > t.ecc_volatile) {
    out.push_back(
        fmt::format("GPU {} has {} uncorrected ECC error(s) since the driver loaded (threshold "
                    "ecc_volatile={})",
                    i, show(v), show(t.ecc_volatile)));
  }
  if (number(f, k + "ecc_aggregate_uncorrected", v) && v > t.ecc_aggregate) {
    out.push_back(fmt::format(
        "GPU {} has {} uncorrected ECC error(s) in its life (threshold ecc_aggregate={})", i,
        show(v), show(t.ecc_aggregate)));
  }
  if (number(f, k + "retired_pending", v) && v != 0) {
    out.push_back(fmt::format("GPU {} has retired pages pending: reset the GPU or reboot", i));
  }
  if (number(f, k + "remap_pending", v) && v != 0) {
    out.push_back(fmt::format("GPU {} has row remappings pending: reset the GPU or reboot", i));
  }
  if (number(f, k + "remap_failed", v) && v != 0) {
    out.push_back(fmt::format("GPU {} failed a row remapping: the GPU needs service", i));
  }
  if (const std::string* th = find(f, k + "throttle");
      th != nullptr && *th != "none" && *th != "n/a" && th->rfind("error", 0) != 0) {
    out.push_back(fmt::format("GPU {} runs slowed down: {}", i, *th));
  }
}

}  // namespace

std::vector<std::string> threshold_names() {
  std::vector<std::string> out;
  for (const auto& n : kNames) out.emplace_back(n.name);
  return out;
}

namespace {

enum class SetResult { kSet, kUnknownName, kNotANumber };

SetResult set_named(Thresholds& t, const std::string& name, const std::string& value) {
  for (const auto& n : kNames) {
    if (name != n.name) continue;
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || !std::isfinite(v)) return SetResult::kNotANumber;
    t.*n.field = v;
    return SetResult::kSet;
  }
  return SetResult::kUnknownName;
}

std::string names_hint() {
  std::string names;
  for (const auto& n : kNames) names += (names.empty() ? "" : ", ") + std::string(n.name);
  return "the thresholds are " + names + " (docs/health.md)";
}

}  // namespace

void set_threshold(Thresholds& t, const std::string& spec) {
  const auto eq = spec.find('=');
  const std::string name = spec.substr(0, eq);
  const std::string value = eq == std::string::npos ? "" : spec.substr(eq + 1);
  switch (set_named(t, name, value)) {
    case SetResult::kSet:
      return;
    case SetResult::kNotANumber:
      throw InputError({"--check-threshold"}, "", "'" + spec + "': '" + value + "' is not a number",
                       "give NAME=NUMBER, e.g. free_gb=20");
    case SetResult::kUnknownName:
      break;
  }
  throw InputError({"--check-threshold"}, "", "'" + name + "' is not a threshold", names_hint());
}

Thresholds node_thresholds(const std::vector<HealthSetting>& settings,
                           const std::vector<std::string>& words) {
  Thresholds t;
  for (const auto& s : settings) {
    if (!s.from_defaults && jobs_threshold(s.name)) {
      throw InputError(s.pos, "health",
                       "'" + s.name + "' is the job's, not one host's: " +
                           (s.name.rfind("net_", 0) == 0
                                ? "the network test judges the streams of every node together"
                                : "every node runs the same GPU test, judged together"),
                       "set it under `defaults: health:` or with --check-threshold");
    }
    switch (set_named(t, s.name, s.value)) {
      case SetResult::kSet:
        break;
      case SetResult::kNotANumber:
        throw InputError(s.pos, "health",
                         "threshold '" + s.name + "': '" + s.value + "' is not a number",
                         "write NAME: NUMBER, e.g. `free_gb: 20`");
      case SetResult::kUnknownName:
        throw InputError(s.pos, "health", "'" + s.name + "' is not a threshold", names_hint());
    }
  }
  for (const auto& w : words) set_threshold(t, w);
  return t;
}

ClockOffset clock_offset(const Facts& facts, long long sent_ns, long long received_ns) {
  double node_ns = 0;
  if (!number(facts, "time_ns", node_ns) || received_ns < sent_ns) return {};
  const double mid = (static_cast<double>(sent_ns) + static_cast<double>(received_ns)) / 2;
  return {.offset_s = (node_ns - mid) / 1e9,
          .uncertainty_s = static_cast<double>(received_ns - sent_ns) / 2e9,
          .known = true};
}

std::vector<std::string> judge_node(const Facts& f, const Thresholds& t, const ClockOffset& clock,
                                    int need_gpus) {
  std::vector<std::string> out;
  judge_free(f, "workdir_free_mb", "the working directory", t, out);
  const std::string* tmpdir = find(f, "tmpdir");
  judge_free(f, "tmpdir_free_mb", "TMPDIR (" + (tmpdir != nullptr ? *tmpdir : "?") + ")", t, out);
  double v = 0;
  if (number(f, "mem_available_mb", v) && v < t.mem_available_gb * 1024) {
    out.push_back(fmt::format("only {} MB of memory available (threshold mem_available_gb={})",
                              show(v), show(t.mem_available_gb)));
  }
  double cpus = 0;
  if (t.load_per_cpu > 0 && number(f, "load1", v) && number(f, "cpus", cpus) && cpus > 0 &&
      v / cpus > t.load_per_cpu) {
    out.push_back(fmt::format("load {} on {} CPU(s) (threshold load_per_cpu={})", show(v),
                              show(cpus), show(t.load_per_cpu)));
  }
  if (number(f, "nofile_hard", v) && v < t.nofile) {
    out.push_back(
        fmt::format("the open-file limit is {} (hard; threshold nofile={}): raise it in "
                    "/etc/security/limits.conf or the service's LimitNOFILE",
                    show(v), show(t.nofile)));
  }
  const auto ports = ib_ports(f);
  if (!ports.empty() && t.memlock_mb != 0) {
    const std::string* hard = find(f, "memlock_hard_mb");
    const bool unlimited = hard != nullptr && *hard == "unlimited";
    const bool enough =
        unlimited || (t.memlock_mb > 0 && number(f, "memlock_hard_mb", v) && v >= t.memlock_mb);
    if (!enough) {
      out.push_back(fmt::format(
          "the locked-memory limit is {} MB on a node with InfiniBand (threshold memlock_mb={}: "
          "{}); NCCL and MPI register memory with the NIC",
          hard != nullptr ? *hard : "?", show(t.memlock_mb),
          t.memlock_mb < 0 ? "unlimited" : "at least that"));
    }
  }
  if (clock.known && std::fabs(clock.offset_s) - clock.uncertainty_s > t.clock_offset_s) {
    out.push_back(fmt::format("the clock is {:.3f} s {} the head's (threshold clock_offset_s={})",
                              std::fabs(clock.offset_s), clock.offset_s > 0 ? "ahead of" : "behind",
                              show(t.clock_offset_s)));
  }
  for (const auto& p : ports) {
    const std::string k = "ib." + p + ".";
    const std::string* state = find(f, k + "state");
    const std::string* phys = find(f, k + "phys_state");
    if ((state != nullptr && *state != "ACTIVE") || (phys != nullptr && *phys != "LinkUp")) {
      out.push_back(fmt::format("InfiniBand port {} is {} ({})", p, state != nullptr ? *state : "?",
                                phys != nullptr ? *phys : "?"));
    }
    if (t.ib_link_downed > 0 && number(f, k + "link_downed", v) && v >= t.ib_link_downed) {
      out.push_back(
          fmt::format("InfiniBand port {} went down {} time(s) (threshold "
                      "ib_link_downed={})",
                      p, show(v), show(t.ib_link_downed)));
    }
  }
  if (const std::string* xid = find(f, "xid"); xid != nullptr && *xid != "none") {
    // Each XID's age (seconds, "?" unknown), when the node gave them.
    const std::string* age_list = find(f, "xid_age_s");
    const auto ages = split_commas(age_list != nullptr ? *age_list : "");
    const double window_s = t.xid_window_h * 3600;
    std::string fatal;
    std::size_t start = 0;
    for (std::size_t k = 0;
         start < xid->size() && std::isdigit(static_cast<unsigned char>((*xid)[start])) != 0; ++k) {
      const auto comma = xid->find(',', start);
      const int code = std::atoi(xid->c_str() + start);
      start = comma == std::string::npos ? xid->size() : comma + 1;
      if (kFatalXids.count(code) == 0 || fatal.find(std::to_string(code)) != std::string::npos)
        continue;
      // Outside the window (when it is known to be): shown in the facts only.
      if (window_s > 0 && k < ages.size() && ages[k] != "?" &&
          std::strtod(ages[k].c_str(), nullptr) > window_s)
        continue;
      fatal += (fatal.empty() ? "" : ", ") + std::to_string(code);
    }
    if (!fatal.empty()) {
      out.push_back("XID " + fatal + " in the kernel log " +
                    (window_s > 0 ? fmt::format("in the last {} h (threshold xid_window_h)",
                                                show(t.xid_window_h))
                                  : std::string("since boot")) +
                    " (a GPU needs a reset or the node a reboot)");
    }
  }
  if (const std::string* nvml = find(f, "nvml"); nvml != nullptr && *nvml == "loaded") {
    if (number(f, "gpu_count", v) && need_gpus > 0 && v < need_gpus) {
      out.push_back(fmt::format("the hostfile lists {} GPU(s), NVML sees {}", need_gpus, show(v)));
    }
    for (const auto& i : indices(f, "gpu.")) judge_gpu(f, i, t, out);
  }
  judge_gpu_test(f, out);
  return out;
}

std::vector<std::vector<std::string>> judge_across(const std::vector<const Facts*>& nodes) {
  std::vector<std::vector<std::string>> out(nodes.size());
  // For every key that must agree: the value most nodes have (more than half
  // of those that report the key), and the nodes that differ.
  std::set<std::string> keys = {"gpu_driver", "gpu_cuda"};
  for (const Facts* f : nodes) {
    if (f == nullptr) continue;
    for (const auto& [k, v] : *f) {
      if (k.rfind("net.", 0) == 0 || (k.rfind("ib.", 0) == 0 && k.ends_with(".rate_gbps")))
        keys.insert(k);
    }
  }
  for (const auto& key : keys) {
    std::map<std::string, int> count;
    int reporting = 0;
    for (const Facts* f : nodes) {
      const std::string* v = f != nullptr ? find(*f, key) : nullptr;
      if (v == nullptr || *v == "unknown" || *v == "n/a" || v->rfind("error", 0) == 0) continue;
      ++count[*v];
      ++reporting;
    }
    if (reporting < 2 || count.size() < 2) continue;
    const auto most =
        std::max_element(count.begin(), count.end(),
                         [](const auto& a, const auto& b) { return a.second < b.second; });
    if (most->second * 2 <= reporting) continue;  // no majority to hold a node against
    for (std::size_t n = 0; n < nodes.size(); ++n) {
      const std::string* v = nodes[n] != nullptr ? find(*nodes[n], key) : nullptr;
      if (v == nullptr || *v == most->first || count.count(*v) == 0) continue;
      std::string what = key;
      if (key == "gpu_driver") what = "GPU driver";
      if (key == "gpu_cuda") what = "CUDA driver version";
      if (key.rfind("net.", 0) == 0) {
        const auto dot = key.rfind('.');
        what = key.substr(4, dot - 4) + (key.ends_with(".mtu") ? " MTU" : " speed (Mb/s)");
      }
      if (key.rfind("ib.", 0) == 0)
        what = "InfiniBand " + key.substr(3, key.rfind('.') - 3) + " rate (Gb/s)";
      out[n].push_back(fmt::format("{} {} differs from the {} of {} other node(s)", what, *v,
                                   most->first, most->second));
    }
  }
  return out;
}

std::vector<std::vector<std::string>> judge_gpu_bandwidth(const std::vector<const Facts*>& nodes,
                                                          double ratio) {
  std::vector<std::vector<std::string>> out(nodes.size());
  struct Gpu {
    std::size_t node;
    std::string index;
    double gbps;
  };
  std::map<std::string, std::vector<Gpu>> by_name;
  for (std::size_t n = 0; n < nodes.size(); ++n) {
    if (nodes[n] == nullptr) continue;
    for (const auto& i : indices(*nodes[n], "cuda.")) {
      double g = 0;
      const std::string* name = find(*nodes[n], "cuda." + i + ".name");
      if (name != nullptr && number(*nodes[n], "cuda." + i + ".mem_gbps", g) && g > 0)
        by_name[*name].push_back({n, i, g});
    }
  }
  for (const auto& [name, gpus] : by_name) {
    if (gpus.size() < 2) continue;
    std::vector<double> g;
    g.reserve(gpus.size());
    for (const auto& x : gpus) g.push_back(x.gbps);
    std::sort(g.begin(), g.end());
    const double median =
        g.size() % 2 == 1 ? g[g.size() / 2] : (g[g.size() / 2 - 1] + g[g.size() / 2]) / 2;
    for (const auto& x : gpus) {
      if (x.gbps >= ratio * median) continue;
      out[x.node].push_back(
          fmt::format("{} reads its memory at {} GB/s (the median of the job's {} {} GPUs {} GB/s; "
                      "threshold gpu_mem_ratio={})",
                      cuda_device(*nodes[x.node], x.index), show(x.gbps), gpus.size(), name,
                      show(median), show(ratio)));
    }
  }
  return out;
}

StreamVerdict judge_streams(const std::vector<Stream>& tested,
                            const std::vector<std::string>& names, const Thresholds& t) {
  const std::size_t n = names.size();
  // Rounds 3 and 4 ran slow streams of rounds 1 and 2 again, alone: a link
  // is as fast as its best run.
  std::vector<Stream> streams;
  std::size_t again = 0;
  for (const auto& s : tested) {
    if (s.round <= 2) streams.push_back(s);
  }
  for (const auto& r : tested) {
    if (r.round <= 2 || !r.error.empty() || r.micros == 0) continue;
    ++again;
    for (auto& s : streams) {
      if (s.round == r.round - 2 && s.from == r.from && s.to == r.to && s.error.empty() &&
          net::gbps(r) > net::gbps(s)) {
        s.bytes = r.bytes;
        s.micros = r.micros;
      }
    }
  }
  StreamVerdict v;
  v.problems.resize(n);
  v.send_gbps.assign(n, 0);
  v.receive_gbps.assign(n, 0);
  using net::gbps;
  std::vector<double> ok;
  std::uint32_t rounds = 0;
  for (const auto& s : streams) {
    rounds = std::max(rounds, s.round);
    if (s.error.empty() && s.micros > 0) ok.push_back(gbps(s));
  }
  for (const auto& s : streams) {
    if (!s.error.empty() && s.from < n && s.to < n) {
      v.problems[s.from].push_back(
          fmt::format("cannot stream to {} for the network test: {}", names[s.to], s.error));
    }
  }
  if (ok.empty()) {
    v.summary = "network test: no stream ran";
    return v;
  }
  const auto median_of = [](std::vector<double> values) {
    std::sort(values.begin(), values.end());
    return values.size() % 2 == 1 ? values[values.size() / 2]
                                  : (values[values.size() / 2 - 1] + values[values.size() / 2]) / 2;
  };
  std::vector<double> sorted = ok;
  std::sort(sorted.begin(), sorted.end());
  const double median = median_of(ok);
  const auto slow_against = [&](double g, double reference) {
    return g < t.net_ratio * reference || g < t.net_gbps;
  };
  const auto slow = [&](double g) { return slow_against(g, median); };
  const auto against_median = [&](double reference, bool others) {
    return fmt::format("the median stream{} {:.2f} Gb/s; threshold net_ratio={}{}",
                       others ? " between the other nodes" : "", reference, show(t.net_ratio),
                       t.net_gbps > 0 ? ", net_gbps=" + show(t.net_gbps) : "");
  };
  const std::string against = against_median(median, false);
  // Each node is judged against the streams it took no part in: a slow
  // node slows the streams to it too (their acknowledgements leave through
  // its link, and it serves them while it sends), and in a small ring those
  // are most of the streams, which pulls the overall median down to it.
  // With two nodes every stream is theirs: the overall median.
  std::vector<double> reference(n, median);
  std::vector<bool> left_out(n, false);  // reference[k] is of the other nodes' streams
  for (std::size_t k = 0; k < n; ++k) {
    std::vector<double> others;
    for (const auto& s : streams) {
      if (s.error.empty() && s.micros > 0 && s.from != k && s.to != k) others.push_back(gbps(s));
    }
    if (others.empty()) continue;
    reference[k] = median_of(others);
    left_out[k] = true;
  }
  // Per node: its streams out and in, and how many of each ran slow.
  std::vector<int> out(n), out_slow(n), in(n), in_slow(n);
  for (const auto& s : streams) {
    if (!s.error.empty() || s.micros == 0 || s.from >= n || s.to >= n) continue;
    const double g = gbps(s);
    ++out[s.from];
    ++in[s.to];
    auto& send = v.send_gbps[s.from];
    auto& receive = v.receive_gbps[s.to];
    send = send == 0 ? g : std::min(send, g);
    receive = receive == 0 ? g : std::min(receive, g);
    if (slow_against(g, reference[s.from])) ++out_slow[s.from];
    if (slow_against(g, reference[s.to])) ++in_slow[s.to];
  }
  std::vector<bool> named(n, false);
  for (std::size_t k = 0; k < n; ++k) {
    const bool others = left_out[k];
    if (out[k] > 0 && out_slow[k] == out[k]) {
      v.problems[k].push_back(fmt::format("sends at {:.3f} Gb/s ({})", v.send_gbps[k],
                                          against_median(reference[k], others)));
      named[k] = true;
    }
    // A node named for its sends: its receiving is not judged (the
    // acknowledgements of what it receives wait in its slow link).
    if (!named[k] && in[k] > 0 && in_slow[k] == in[k]) {
      v.problems[k].push_back(fmt::format("receives at {:.3f} Gb/s ({})", v.receive_gbps[k],
                                          against_median(reference[k], others)));
      named[k] = true;
    }
  }
  // A slow stream that neither end explains: its link.
  for (const auto& s : streams) {
    if (!s.error.empty() || s.micros == 0 || s.from >= n || s.to >= n || !slow(gbps(s))) continue;
    if (named[s.from] || named[s.to]) continue;
    v.problems[s.from].push_back(
        fmt::format("the stream to {} ran at {:.3f} Gb/s ({})", names[s.to], gbps(s), against));
  }
  v.summary = fmt::format(
      "network test: {} stream(s) in {} round(s), median {:.2f} Gb/s, slowest {:.3f} Gb/s{}",
      ok.size(), rounds, median, sorted.front(),
      again == 0 ? std::string() : fmt::format(" ({} slow stream(s) run again alone)", again));
  return v;
}

Summary summarize(const Facts& f, const ClockOffset& clock) {
  const auto get = [&f](const std::string& key, const std::string& unit = "") {
    const std::string* v = find(f, key);
    if (v == nullptr) return std::string("-");
    double n = 0;
    return number(f, key, n) ? *v + unit : *v;
  };
  Summary s;
  s.kernel = get("kernel");
  s.load = get("load1") + "/" + get("cpus");
  s.mem = get("mem_available_mb", "M");
  s.wdir = get("workdir_free_mb", "M");
  s.tmp = get("tmpdir_free_mb", "M");
  s.nofile = get("nofile_hard");
  s.clock = clock.known ? fmt::format("{:+.3f}s", clock.offset_s) : "-";
  const std::string* nvml = find(f, "nvml");
  const bool loaded = nvml != nullptr && *nvml == "loaded";
  s.gpus = loaded ? get("gpu_count") : "-";
  s.driver = loaded ? get("gpu_driver") + "/" + get("gpu_cuda") : "-";
  const auto ports = ib_ports(f);
  int up = 0;
  for (const auto& p : ports) {
    const std::string* st = find(f, "ib." + p + ".state");
    if (st != nullptr && *st == "ACTIVE") ++up;
  }
  s.ib = ports.empty() ? "-" : fmt::format("{}/{} up", up, ports.size());
  const std::string* xid = find(f, "xid");
  s.xid = xid == nullptr ? "-" : xid->rfind("not read", 0) == 0 ? "not read" : *xid;
  return s;
}

}  // namespace dlaunch::health
