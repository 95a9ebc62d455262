// How many file descriptors the head needs for a job, and whether that fits
// under the process's limit (RLIMIT_NOFILE), decided before anything starts:
// a job that does not fit would otherwise fail part-way, with some agents
// started, when the first connection past the limit gets EMFILE.
//
// What the head holds per node, from the code (the agents' descriptors are
// their own process's, on their own machine):
//   SSH node      1: the TCP socket of its connection (libssh2 runs on it;
//                 Asio's timers share one timerfd, so the deadline, keepalive
//                 and close timers cost none).
//   local node    2: the pipe ends to and from its agent (the agent's stderr
//   Slurm node    is dlaunch's own). A Slurm node's srun is a local child too.
//   --output-dir  2 per rank (rank.N.out, rank.N.err, opened when the rank
//                 first writes) and 1 for the job's folder.
// On top: what is open when the check runs (stdio, the event loop's epoll,
// eventfd and timerfd, the signal pipe, anything inherited), and a reserve
// for what is opened and closed again while nodes start (the resolver's
// netlink socket, known_hosts and key files, an ssh-agent socket, a local
// agent's pipes while it is spawned).
#pragma once

#include <optional>
#include <string>

#include "plan/plan.h"

namespace dlaunch {

struct DescriptorNeed {
  long long ssh_nodes = 0;
  long long proxied_nodes =
      0;  // SSH nodes behind a jump host or ProxyCommand: a socketpair end more
  long long process_nodes = 0;  // local and Slurm nodes, and nodes reached with the system's ssh
  long long output_files = 0;   // --output-dir: per-rank files and the folder
  long long base = 0;           // open now, plus the reserve
  long long total() const {
    return ssh_nodes * kPerSshNode + proxied_nodes + process_nodes * kPerProcessNode +
           output_files + base;
  }

  static constexpr long long kPerSshNode = 1;
  static constexpr long long kPerProcessNode = 2;
  // Opened and closed again while nodes start (at most this many at once).
  static constexpr long long kReserve = 16;
};

// What the job needs; `open_now`: descriptors this process has open already;
// `proxied`: how many of its libssh2 SSH nodes are reached through a jump
// host or a ProxyCommand.
DescriptorNeed descriptors_needed(const JobPlan& plan, bool output_dir, long long open_now,
                                  long long proxied = 0);

// Empty when the job fits under `limit` (the soft RLIMIT_NOFILE in force,
// after raise_descriptor_limit); else the message to refuse it with, which
// says what it needs, what the limit is (`hard`: the hard limit) and how to
// raise it.
std::optional<std::string> descriptor_shortfall(const DescriptorNeed& need,
                                                unsigned long long limit, unsigned long long hard);

// Whether `extra` more descriptors than check_descriptors counts still fit
// under the soft limit (something the job can do without, like the record's
// per-rank logs).
bool descriptors_fit(const JobPlan& plan, bool output_dir, long long proxied, long long extra);

// Descriptors this process has open (entries of /proc/self/fd), or 0 if that
// cannot be read.
long long open_descriptors();

// Throws Error (kEnvironment: exit 1, nothing started) when the job does not
// fit under this process's descriptor limit.
void check_descriptors(const JobPlan& plan, bool output_dir, long long proxied = 0);

}  // namespace dlaunch
