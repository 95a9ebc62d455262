// What /proc says of a process, for the few places that ask: its identity
// (pid plus start time, so that a later process given the same pid is not
// taken for it), how long it has waited for a CPU, and which boot of which
// machine this is (two processes see each other's /proc only on the same
// boot, and only then are the numbers comparable).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace dlaunch {

// A process as another process can name it: the pid alone may be reused.
struct ProcessRef {
  long pid = 0;
  unsigned long long start_ticks = 0;  // /proc/<pid>/stat's starttime
};

// A /proc file whole, read with read(2) ("" when unreadable). Never throws:
// a process that ends meanwhile fails the read with ESRCH, which libstdc++'s
// filebuf throws through an istreambuf_iterator (an agent died of it, with
// 1024 jobs starting at once).
std::string read_proc_file(const std::string& path);

// /proc/<pid>/stat's starttime (clock ticks after boot), 0 when unreadable.
unsigned long long process_start_ticks(long pid);

// Its state letter ('R' running or waiting for a CPU, 'S', 'D', 'Z', ...)
// and its CPU time so far (user + system, clock ticks): /proc/<pid>/stat's
// fields 3, 14 and 15; nullopt when unreadable (no such process).
struct ProcessCpu {
  char state = 0;
  unsigned long long ticks = 0;
};
std::optional<ProcessCpu> process_cpu(long pid);

// This process, or its parent, as a ProcessRef ({} when unreadable).
ProcessRef this_process();
ProcessRef parent_process();

// Nanoseconds `p` has spent runnable but waiting for a CPU, since it started,
// all its threads together (the second field of each thread's schedstat):
// nullopt when the process is gone,
// is another process now (start time differs), or the kernel does not keep
// the figure.
std::optional<std::int64_t> run_delay_ns(const ProcessRef& p);

// /proc/sys/kernel/random/boot_id: empty when unreadable.
std::string boot_id();

}  // namespace dlaunch
