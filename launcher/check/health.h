// What `dlaunch --check` makes of each node's health facts (the lines of
// `dlaunch-agent --health`, agent/health/node_health.h): every figure against
// a threshold with a documented default (--check-threshold NAME=VALUE;
// docs/health.md), and the figures that must agree across the job's nodes
// (the GPU driver and CUDA versions, the MTU and speed of interfaces of the
// same name, the InfiniBand rate) against what most nodes have. Pure
// functions over text, so that they are tested without hardware.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "hostfile/hostfile.h"
#include "net/stream.h"

namespace dlaunch::health {

struct Thresholds {
  double free_gb = 1.0;           // free_gb: the working directory and TMPDIR, each
  double mem_available_gb = 1.0;  // mem_available_gb: MemAvailable
  double load_per_cpu = 0;        // load_per_cpu: the 1-minute load per CPU; 0: shown only
  double nofile = 4096;           // nofile: the hard limit of open files (the agent raises to it)
  // memlock_mb: the hard locked-memory limit on nodes with InfiniBand ports
  // (NCCL and MPI register memory with the NIC); -1: unlimited; 0: no check.
  double memlock_mb = -1;
  double gpu_temp_c = 85;       // gpu_temp_c
  double ecc_volatile = 0;      // ecc_volatile: uncorrected ECC errors since the driver loaded
  double ecc_aggregate = 0;     // ecc_aggregate: uncorrected ECC errors in the GPU's life
  double clock_offset_s = 1.0;  // clock_offset_s: the node's clock against the head's
  double ib_link_downed = 0;    // ib_link_downed: link-down events of a port; 0: shown only
  // xid_window_h: a fatal XID counts when logged within this many hours;
  // 0: any since boot (older ones are shown, not held against the node).
  double xid_window_h = 0;
  // The network test between nodes: a node whose streams all ran below
  // net_ratio x the median stream (or below net_gbps Gb/s) is named.
  double net_ratio = 0.2;
  double net_gbps = 0;
  // The GPU test (--check and --preflight, not =quick): MiB of each GPU's
  // memory written and read back (at most half of what is free); 0: no
  // test. A GPU that reads its memory below gpu_mem_ratio x the median of
  // the job's GPUs of its name is named. Both the job's, as net_ratio.
  double gpu_test_mb = 512;
  double gpu_mem_ratio = 0.5;
};

// One threshold named as in docs/health.md. Throws InputError naming
// --check-threshold for an unknown name or a value that is not a number.
void set_threshold(Thresholds& t, const std::string& name_equals_value);

// The names, for messages and the docs.
std::vector<std::string> threshold_names();

// One node's thresholds: the defaults, changed by the node's hostfile
// `health:` settings in their order (`defaults:`'s, then its own), then by
// --check-threshold's NAME=VALUE words, which win. Throws InputError at the
// hostfile's place (field `health`) for a name that is not a threshold, a
// value that is not a number, or net_ratio/net_gbps set for one host only
// (the network test judges the job's streams together).
Thresholds node_thresholds(const std::vector<HealthSetting>& settings,
                           const std::vector<std::string>& words);

using Facts = std::map<std::string, std::string>;  // KEY -> VALUE, without "health."

// The clock of a node against the head's: the node's time_ns taken between
// the head's `sent_ns` and `received_ns` (wall clock). Offset (seconds, +:
// the node is ahead) and its uncertainty (half the round trip).
struct ClockOffset {
  double offset_s = 0;
  double uncertainty_s = 0;
  bool known = false;
};
ClockOffset clock_offset(const Facts& facts, long long sent_ns, long long received_ns);

// The problems of one node by its own facts; empty: healthy. `need_gpus`: the
// GPUs the hostfile lists for it (0: none listed).
std::vector<std::string> judge_node(const Facts& facts, const Thresholds& t,
                                    const ClockOffset& clock, int need_gpus);

// The problems of each node (same order as `nodes`) in what must agree
// across nodes; a node without facts (nullptr) is left out.
std::vector<std::vector<std::string>> judge_across(const std::vector<const Facts*>& nodes);

// The GPU test's memory bandwidth (cuda.I.mem_gbps) of every GPU against the
// median of the job's GPUs of the same name: the problems of each node (same
// order as `nodes`) whose GPU read below `ratio` x that median.
std::vector<std::vector<std::string>> judge_gpu_bandwidth(const std::vector<const Facts*>& nodes,
                                                          double ratio);

using Stream = net::Stream;  // one stream of the network test (net/stream.h)
struct StreamVerdict {
  std::vector<std::vector<std::string>> problems;  // per node
  std::string summary;                             // one line for the report
  std::vector<double> send_gbps, receive_gbps;     // per node: its slowest; 0: none measured
};
// Which node's streams ran slow: a node whose every stream out (or every one
// in) is below the threshold is named with its figure against the median; a
// slow stream that no node explains names its link. `names`: each node's
// label ("node 3 (gpu-3)").
StreamVerdict judge_streams(const std::vector<Stream>& streams,
                            const std::vector<std::string>& names, const Thresholds& t);

// A short line of the figures, for the health table's cells.
struct Summary {
  std::string kernel, load, mem, wdir, tmp, nofile, clock, gpus, driver, ib, xid;
};
Summary summarize(const Facts& facts, const ClockOffset& clock);

}  // namespace dlaunch::health
