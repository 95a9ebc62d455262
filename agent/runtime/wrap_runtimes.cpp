#include "wrap_runtimes.h"

#include <unistd.h>

#include "command.h"
#include "dlaunch/process.h"

namespace dlaunch::agent {

namespace {

constexpr auto kCreateLimit = std::chrono::seconds(600);

// An image given as a file (a .sif or .sqsh), not a registry reference.
bool is_image_file(const std::string& image) {
  return image.find("://") == std::string::npos &&
         (image.front() == '/' || image.rfind("./", 0) == 0 || image.ends_with(".sif") ||
          image.ends_with(".sqsh"));
}

std::string entry_name(const std::string& entry) { return entry.substr(0, entry.find('=')); }

std::string value_in(const std::vector<std::string>& env, const std::string& name) {
  std::string out;
  for (const auto& e : env) {
    if (entry_name(e) == name) out = e.substr(name.size() + 1);
  }
  return out;
}

}  // namespace

std::vector<std::string> apptainer_args(const std::string& program,
                                        const proto::ContainerSpec& spec, const RuntimeNode& node,
                                        const std::vector<std::string>& rank_env,
                                        const std::vector<std::string>& argv) {
  // `run` goes through the image's runscript (its entrypoint), `exec` not.
  std::vector<std::string> a = {program, spec.entrypoint ? "run" : "exec"};
  // Apptainer mounts home unless told not to.
  if (!spec.mount_home) a.emplace_back("--no-home");
  if (node.gpus.present) a.emplace_back("--nv");  // the driver's libraries and devices
  for (const auto& m : container_mounts(spec, node)) {
    if (m.source == node.home && spec.mount_home) continue;  // its own
    a.insert(a.end(), {"--bind", m.source + ":" + m.target + (m.read_only ? ":ro" : "")});
  }
  a.insert(a.end(), {"--pwd", spec.workdir.empty() ? node.workdir : spec.workdir});
  // The host's environment passes in, but the image's %environment wins
  // over it, except for what --env sets: the names the user kept.
  for (const auto& name : spec.env) {
    a.insert(a.end(), {"--env", name + "=" + value_in(rank_env, name)});
  }
  a.push_back(spec.image);
  a.insert(a.end(), argv.begin(), argv.end());
  return a;
}

namespace {

// apptainer and enroot give their containers the host's /dev and IPC: no
// size of /dev/shm to choose.
std::string shm_size_refusal(const proto::ContainerSpec& spec, const char* runtime) {
  if (spec.shm_size.empty()) return {};
  return std::string("--container-shm-size: ") + runtime +
         " shares the host's /dev/shm (no size to set); use podman or docker, or leave it out";
}

}  // namespace

Result<std::string> ApptainerRuntime::prepare(const RuntimeNode& node) {
  node_ = node;
  if (auto no = shm_size_refusal(spec_, "apptainer"); !no.empty()) {
    return Result<std::string>::failure(no);
  }
  if (is_image_file(spec_.image) && ::access(spec_.image.c_str(), R_OK) != 0) {
    return Result<std::string>::failure("image file " + spec_.image + " not found on " +
                                        node.hostname);
  }
  return "apptainer image " + spec_.image + " (a container per rank)";
}

void ApptainerRuntime::adapt(SpawnOptions& opts) const {
  opts.argv = apptainer_args(program_, spec_, node_, opts.env, opts.argv);
}

std::vector<std::string> enroot_create_args(const std::string& program,
                                            const proto::ContainerSpec& spec,
                                            const std::string& name) {
  return {program, "create", "--force", "--name", name, spec.image};
}

std::vector<std::string> enroot_start_args(const std::string& program,
                                           const proto::ContainerSpec& spec,
                                           const RuntimeNode& node, const std::string& name,
                                           const std::vector<std::string>& rank_env,
                                           const std::vector<std::string>& argv) {
  std::vector<std::string> a = {program, "start", "--rw"};
  if (node.uid == 0) a.emplace_back("--root");
  for (const auto& m : container_mounts(spec, node)) {
    // enroot's mounts are fstab lines with ':' between the fields.
    a.insert(a.end(), {"--mount", m.source + ":" + m.target + ":none:x-create=auto,rbind" +
                                      (m.read_only ? ",ro" : "")});
  }
  // Every variable of the rank by name: enroot takes its value from its own
  // environment, which is the rank's. The image's /etc/environment comes
  // first inside, so those it sets too are the rank's values only when the
  // user named them in --container-env; dlaunch's own are always passed.
  for (const auto& e : rank_env) {
    const std::string n = entry_name(e);
    if (!n.empty()) a.insert(a.end(), {"--env", n});
  }
  a.push_back(name);
  // enroot start has no working-directory option: a shell of the image
  // changes there first.
  a.insert(a.end(), {"/bin/sh", "-c", "cd \"$0\" && exec \"$@\"",
                     spec.workdir.empty() ? node.workdir : spec.workdir});
  a.insert(a.end(), argv.begin(), argv.end());
  return a;
}

std::vector<std::string> enroot_remove_args(const std::string& program, const std::string& name) {
  return {program, "remove", "--force", name};
}

Result<std::string> EnrootRuntime::prepare(const RuntimeNode& node) {
  using R = Result<std::string>;
  node_ = node;
  if (!is_image_file(spec_.image)) {
    return R::failure("enroot takes a squashfs image file here, not '" + spec_.image +
                      "' (make one with `enroot import docker://IMAGE`)");
  }
  if (spec_.pull == "always") {
    return R::failure("--container-pull always does not apply to an image file under enroot");
  }
  if (auto no = shm_size_refusal(spec_, "enroot"); !no.empty()) return R::failure(no);
  const std::string name = container_name(node.job_id, node.node_rank);
  const auto create = enroot_create_args(program_, spec_, name);
  name_ = name;
  auto r = run_command(create, node.env, kCreateLimit);
  if (!r.ok()) {
    return R::failure("cannot create the enroot container of " + spec_.image + " on " +
                      node.hostname + ": " + describe_failure(create, r));
  }
  return "enroot container " + name;
}

void EnrootRuntime::adapt(SpawnOptions& opts) const {
  // enroot's NVIDIA hook gives the container the GPUs these name.
  if (node_.gpus.present) add_nvidia_hook_env(opts.env);
  opts.argv = enroot_start_args(program_, spec_, node_, name_, opts.env, opts.argv);
}

std::vector<std::string> EnrootRuntime::removal_command(const RuntimeNode& node) const {
  return enroot_remove_args(program_, container_name(node.job_id, node.node_rank));
}

std::string EnrootRuntime::teardown(std::chrono::milliseconds limit) {
  if (name_.empty()) return {};
  const auto rm = enroot_remove_args(program_, name_);
  auto r = run_command(rm, node_.env, limit);
  name_.clear();
  return r.ok() ? std::string() : describe_failure(rm, r);
}

}  // namespace dlaunch::agent
