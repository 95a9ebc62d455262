// podman and docker (runtime.h): one long-lived container per node, started
// with `RUNTIME run -d --rm` around dlaunch-keepalive (host network, IPC and
// PID, the job's folders mounted, labels with the job id), which the workers
// enter (setns) between fork and exec. Its end, whatever happens to the agent:
//   - the agent removes it once the last worker is gone (rm -f);
//   - the guard runs the same rm -f if the agent dies without doing it;
//   - dlaunch-keepalive exits when the agent's pid is gone, and --rm makes
//     the runtime remove the container then, should the guard be gone too.
// A container of the same name (a leftover of the same job and node) is
// removed before the new one starts.
#pragma once

#include <string>
#include <vector>

#include "dlaunch/unique_fd.h"
#include "runtime.h"

namespace dlaunch::agent {

class OciRuntime final : public Runtime {
 public:
  OciRuntime(RuntimeKind kind, std::string program, proto::ContainerSpec spec);
  ~OciRuntime() override;
  OciRuntime(const OciRuntime&) = delete;
  OciRuntime& operator=(const OciRuntime&) = delete;

  RuntimeKind kind() const override { return kind_; }
  Result<std::vector<std::string>> pull_command(const RuntimeNode& node) override;
  Result<std::string> prepare(const RuntimeNode& node) override;
  std::string check_program(const std::string& prog, const std::vector<std::string>& env,
                            const std::string& workdir) override;
  int open_in_image(const std::string& path) const override;
  std::vector<std::string> base_environment(std::vector<std::string> agent_env) const override;
  void adapt(SpawnOptions& opts) const override;
  std::vector<pid_t> own_processes() const override;
  std::vector<std::string> removal_command(const RuntimeNode& node) const override;
  std::string teardown(std::chrono::milliseconds limit) override;

 private:
  Result<std::string> start(const RuntimeNode& node);
  // Why this node cannot start the container whatever the image; empty: none.
  std::string refusal(const RuntimeNode& node) const;

  RuntimeKind kind_;
  std::string program_;
  proto::ContainerSpec spec_;
  std::vector<std::string> env_;  // the agent's, for the runtime's commands
  std::string name_;              // empty until prepare()
  std::string hostname_;
  bool started_ = false;
  pid_t main_pid_ = 0;     // dlaunch-keepalive, in the host's PID namespace
  pid_t monitor_pid_ = 0;  // podman's conmon (a subreaper's orphan: our descendant)
  UniqueFd userns_;        // the container's user namespace when it is not ours
  UniqueFd mntns_;
  UniqueFd root_;
  std::vector<std::string> image_env_;
  std::vector<std::string> entrypoint_;  // --container-entrypoint: the image's
};

}  // namespace dlaunch::agent
