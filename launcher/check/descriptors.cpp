#include "check/descriptors.h"

#include <dirent.h>
#include <sys/resource.h>

#include <fmt/format.h>

#include "dlaunch/error.h"
#include "dlaunch/process.h"

namespace dlaunch {

DescriptorNeed descriptors_needed(const JobPlan& plan, bool output_dir, long long open_now,
                                  long long proxied) {
  DescriptorNeed need;
  need.proxied_nodes = proxied;
  for (const auto& n : plan.nodes) {
    if (n.host.transport == Transport::kSsh && n.host.ssh_client == SshClient::kLibssh2) {
      ++need.ssh_nodes;
    } else {
      ++need.process_nodes;
    }
  }
  if (output_dir) need.output_files = 2LL * plan.world_size + 1;
  need.base = open_now + DescriptorNeed::kReserve;
  return need;
}

std::optional<std::string> descriptor_shortfall(const DescriptorNeed& need,
                                                unsigned long long limit, unsigned long long hard) {
  const long long total = need.total();
  if (total <= 0 || static_cast<unsigned long long>(total) <= limit) return std::nullopt;
  std::string parts;
  auto part = [&parts](long long count, long long each, const char* what) {
    if (count == 0) return;
    parts += fmt::format("{}{} {} x {}", parts.empty() ? "" : ", ", count, what, each);
  };
  part(need.ssh_nodes, DescriptorNeed::kPerSshNode, "SSH node(s)");
  part(need.proxied_nodes, 1, "of them behind a jump host or ProxyCommand");
  part(need.process_nodes, DescriptorNeed::kPerProcessNode, "local or Slurm node(s)");
  if (need.output_files > 0) {
    parts += fmt::format("{}{} for --output-dir", parts.empty() ? "" : ", ", need.output_files);
  }
  parts += fmt::format("{}{} for dlaunch itself", parts.empty() ? "" : ", ", need.base);
  // A round figure with a quarter to spare.
  const auto spare = static_cast<unsigned long long>(total + total / 4);
  const unsigned long long suggest = (spare + 1023) / 1024 * 1024;
  const std::string where =
      limit >= hard ? fmt::format(
                          "its limit of {} open files (RLIMIT_NOFILE: the hard limit, to "
                          "which dlaunch raised the soft limit)",
                          limit)
                    : fmt::format(
                          "its limit of {} open files (RLIMIT_NOFILE; the soft limit, "
                          "which dlaunch could not raise to the hard limit of {})",
                          limit, hard);
  return fmt::format(
      "this job needs about {} open files in dlaunch ({}), over {}; nothing was started "
      "(hint: raise the limit to {} or more: `ulimit -n {}` in the shell that starts dlaunch "
      "(raising the hard limit needs root), or for your user in /etc/security/limits.conf "
      "(`USER soft nofile {}` and `USER hard nofile {}`, then log in again; LimitNOFILE= for a "
      "systemd service); or run on fewer nodes (--num-nodes))",
      total, parts, where, suggest, suggest, suggest, suggest);
}

long long open_descriptors() {
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return 0;
  long long n = 0;
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(d);
  return n > 0 ? n - 1 : 0;  // less the directory's own descriptor
}

bool descriptors_fit(const JobPlan& plan, bool output_dir, long long proxied, long long extra) {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return true;
  auto need = descriptors_needed(plan, output_dir, open_descriptors(), proxied);
  need.base += extra;
  return static_cast<unsigned long long>(need.total()) <= rl.rlim_cur;
}

void check_descriptors(const JobPlan& plan, bool output_dir, long long proxied) {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return;
  const unsigned long long hard = rl.rlim_max == RLIM_INFINITY ? ~0ULL : rl.rlim_max;
  const auto need = descriptors_needed(plan, output_dir, open_descriptors(), proxied);
  if (auto why = descriptor_shortfall(need, rl.rlim_cur, hard)) {
    throw Error(ErrorKind::kEnvironment, *why);
  }
}

}  // namespace dlaunch
