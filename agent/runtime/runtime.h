// Runtime: where the agent's workers run (the seam of docs/architecture.md).
//
// The agent spawns every worker itself, the same way whatever the runtime:
// fork/exec, its own process group, the parent-death signal, the job's
// cgroup, its pipes, the guard watching its group. A Runtime only decides
// where the exec lands:
//   native     on the host, as ever;
//   podman, docker   one container per node that holds the node's ranks
//              (pyxis's model, docs/containers.md): prepare() starts it
//              (host network, IPC and PID; the job's folders mounted), each
//              worker enters its mount namespace (and, rootless, its user
//              namespace) between fork and exec, so its pid, exit status,
//              signals and output are the agent's as for a native worker;
//              teardown() removes it;
//   apptainer, enroot   each worker's command is wrapped (apptainer exec
//              IMAGE ..., enroot start NAME ...): the runtime's process is
//              the worker.
//
// States: made -> prepared -> torn down; teardown() may come at any point,
// more than once, and after a failed prepare().
// Thread safety: none; the agent's event loop.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "dlaunch/error.h"
#include "dlaunch/process.h"
#include "dlaunch/proto/container.h"

namespace dlaunch::agent {

enum class RuntimeKind { kNative, kPodman, kDocker, kApptainer, kEnroot };

std::string runtime_name(RuntimeKind kind);

// The node's NVIDIA GPUs as the agent finds them (find_node_gpus): when it
// has any, every runtime gives them all to the container (each rank's
// CUDA_VISIBLE_DEVICES then means what it means outside): podman through
// the CDI spec of nvidia.com/gpu when the node has one, else the NVIDIA
// OCI hook's NVIDIA_VISIBLE_DEVICES; docker `--gpus all`; apptainer `--nv`;
// enroot its NVIDIA hook, through NVIDIA_VISIBLE_DEVICES.
struct NodeGpus {
  bool present = false;  // /dev/nvidiactl: the NVIDIA driver is loaded here
  std::string cdi_spec;  // a CDI spec file naming nvidia.com/gpu; empty: none
};

// `root` replaces / (tests); the CDI folders are podman's: /etc/cdi, /var/run/cdi.
NodeGpus find_node_gpus(const std::string& root = "");

// What a runtime needs to know of this node's share of the job.
struct RuntimeNode {
  std::string job_id;
  int node_rank = 0;
  std::string hostname;
  std::string workdir;  // the job's working directory here (mounted at that path)
  // The job's private folders here (error files, the store's socket, PMIx's folder).
  std::vector<std::string> job_dirs;
  pid_t agent_pid = 0;
  unsigned long long agent_start_ticks = 0;  // with the pid, the agent (a label of its container)
  std::string keepalive;                     // dlaunch-keepalive on this host (podman, docker)
  uid_t uid = 0;
  gid_t gid = 0;
  std::string home;
  std::vector<std::string> env;  // the agent's environment: PATH finds the runtime's program
  NodeGpus gpus;
};

class Runtime {
 public:
  virtual ~Runtime() = default;
  virtual RuntimeKind kind() const = 0;
  // Before prepare(): the command that brings the image to this node when
  // it must be pulled first (--container-pull always, or missing and not
  // here), for the agent to run as a child of its loop (a pull takes
  // minutes, and the node heartbeats meanwhile); empty when there is
  // nothing to pull (apptainer and enroot run image files); or why the
  // node cannot run the container at all.
  virtual Result<std::vector<std::string>> pull_command(const RuntimeNode& node) {
    (void)node;
    return std::vector<std::string>{};
  }
  // Everything that can fail before a rank starts (the image, the
  // container): what was made, for the log, or why it cannot run here.
  // Pulls nothing: pull_command() came first.
  virtual Result<std::string> prepare(const RuntimeNode& node) = 0;
  // What a worker's program and directory look like from where it will run:
  // empty when both are there, else why not (checked before any rank starts).
  virtual std::string check_program(const std::string& prog, const std::vector<std::string>& env,
                                    const std::string& workdir) = 0;
  // A file of the image, open for reading (absolute paths and links taken
  // within the image's root), or -1 when it is not there or the runtime
  // cannot look inside (apptainer and enroot run image files). After
  // prepare().
  virtual int open_in_image(const std::string& path) const {
    (void)path;
    return -1;
  }
  // The environment a worker starts from, before dlaunch's own variables go
  // on top: the agent's, with the image's where the image's win.
  virtual std::vector<std::string> base_environment(std::vector<std::string> agent_env) const {
    return agent_env;
  }
  // Makes opts start the worker where it runs.
  virtual void adapt(SpawnOptions& opts) const = 0;
  // Processes of the runtime's own (a container's main process, its
  // monitor) that the agent must not take for the job's leftovers.
  virtual std::vector<pid_t> own_processes() const { return {}; }
  // The command that removes what prepare(node) makes, for the guard to run
  // if the agent dies (given before prepare); empty when there is nothing.
  virtual std::vector<std::string> removal_command(const RuntimeNode& node) const {
    (void)node;
    return {};
  }
  // Removes what prepare() made, waiting at most `limit`: empty, or what
  // went wrong.
  virtual std::string teardown(std::chrono::milliseconds limit) = 0;
};

// The runtime for a job's ContainerSpec on this node: native without an
// image; with one, the named runtime, or the first of podman, docker,
// apptainer, enroot on PATH ("auto"). Fails when that program is not here.
Result<std::unique_ptr<Runtime>> make_runtime(const proto::ContainerSpec& spec,
                                              const std::vector<std::string>& env,
                                              const std::string& hostname);

// The pieces of the command lines, for the unit tests.
std::string container_name(const std::string& job_id, int node_rank);
// The runtime's mounts for a node: the job's folders, the working directory,
// home (if asked), then the user's, in that order.
std::vector<proto::ContainerMount> container_mounts(const proto::ContainerSpec& spec,
                                                    const RuntimeNode& node);
// podman / docker run of the node's container (program: the runtime's path),
// with --pull never: the agent pulled what was missing (pull_command).
std::vector<std::string> oci_run_args(RuntimeKind kind, const std::string& program,
                                      const proto::ContainerSpec& spec, const RuntimeNode& node);
std::vector<std::string> oci_remove_args(RuntimeKind kind, const std::string& program,
                                         const std::string& name);
// The agent a container's dlaunch.agent label names ("PID.START_TICKS"), if
// that process is still running; 0 otherwise (gone, or no such label).
pid_t running_agent_of_label(const std::string& label);
// Whether the image is in the runtime's storage (exit status 0), and its pull.
std::vector<std::string> oci_image_present_args(RuntimeKind kind, const std::string& program,
                                                const std::string& image);
std::vector<std::string> oci_pull_args(const std::string& program, const std::string& image);
// The variables NVIDIA's hooks (the OCI hook, enroot's) read to give a
// container the GPUs, where the rank's environment does not set them.
void add_nvidia_hook_env(std::vector<std::string>& env);
// apptainer exec|run IMAGE argv... for one worker.
std::vector<std::string> apptainer_args(const std::string& program,
                                        const proto::ContainerSpec& spec, const RuntimeNode& node,
                                        const std::vector<std::string>& rank_env,
                                        const std::vector<std::string>& argv);
// enroot create of the node's container, and enroot start NAME argv... for a worker.
std::vector<std::string> enroot_create_args(const std::string& program,
                                            const proto::ContainerSpec& spec,
                                            const std::string& name);
std::vector<std::string> enroot_start_args(const std::string& program,
                                           const proto::ContainerSpec& spec,
                                           const RuntimeNode& node, const std::string& name,
                                           const std::vector<std::string>& rank_env,
                                           const std::vector<std::string>& argv);
std::vector<std::string> enroot_remove_args(const std::string& program, const std::string& name);

// The environment a worker starts from in a container: the agent's, then
// the image's (where the user did not keep the host's value by naming it in
// --container-env, and never HOSTNAME), later entries winning.
std::vector<std::string> layered_environment(const std::vector<std::string>& agent_env,
                                             const std::vector<std::string>& image_env,
                                             const std::vector<std::string>& keep_host);

}  // namespace dlaunch::agent
