// What a node says about its own health (`dlaunch-agent --health`), for
// `dlaunch --check` (launcher/check/health.h judges it, docs/health.md): the
// kernel, CPUs, load, memory, free space where the job writes, descriptor and
// locked-memory limits, the clock, InfiniBand ports and Ethernet interfaces
// from sysfs, XID errors from the kernel log, and every GPU through NVML
// (loaded at run time: no build or run dependency on the driver).
//
// Facts only: no thresholds here. Each is one `health.KEY=VALUE` line, so
// that an older head skips what it does not know and a newer one sees what is
// missing.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace dlaunch::agent::health {

using Facts = std::vector<std::pair<std::string, std::string>>;

struct Where {
  std::string workdir;  // the job's working directory
  // Stands for / when reading /sys, /proc/loadavg, /proc/meminfo and
  // /dev/kmsg: tests point it at a made-up tree (DLAUNCH_HEALTH_ROOT);
  // empty: the node's own.
  std::string root;
};

Facts collect(const Where& where);

// The lines `dlaunch-agent --health` prints.
std::string to_lines(const Facts& facts);

// XID codes in kernel log records ("NVRM: Xid (PCI:0000:3b:00): 79, pid=...").
std::vector<int> xids_in(const std::string& log);
// The same records' times, microseconds since boot (a /dev/kmsg record's
// third field; -1 where a line has none), in the same order.
std::vector<long long> xid_times_in(const std::string& log);

}  // namespace dlaunch::agent::health
