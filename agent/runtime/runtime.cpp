#include "runtime.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "oci_runtime.h"
#include "wrap_runtimes.h"

namespace dlaunch::agent {

namespace {

// Today's workers: on the host, checked there.
class NativeRuntime final : public Runtime {
 public:
  explicit NativeRuntime(std::string hostname) : hostname_(std::move(hostname)) {}
  RuntimeKind kind() const override { return RuntimeKind::kNative; }
  Result<std::string> prepare(const RuntimeNode&) override { return std::string(); }
  std::string check_program(const std::string& prog, const std::vector<std::string>& env,
                            const std::string& workdir) override {
    if (!workdir.empty() && ::access(workdir.c_str(), X_OK) != 0) {
      return "working directory '" + workdir + "' does not exist on " + hostname_ + " (use --wdir)";
    }
    if (!prog.empty() && find_program(prog, env, workdir).empty()) {
      return "program '" + prog + "' not found on " + hostname_ +
             " (not on PATH, or not executable, in " + workdir + ")";
    }
    return {};
  }
  void adapt(SpawnOptions&) const override {}
  std::string teardown(std::chrono::milliseconds) override { return {}; }

 private:
  std::string hostname_;
};

std::string name_of(const std::string& entry) { return entry.substr(0, entry.find('=')); }

}  // namespace

std::string runtime_name(RuntimeKind kind) {
  switch (kind) {
    case RuntimeKind::kNative:
      return "native";
    case RuntimeKind::kPodman:
      return "podman";
    case RuntimeKind::kDocker:
      return "docker";
    case RuntimeKind::kApptainer:
      return "apptainer";
    case RuntimeKind::kEnroot:
      return "enroot";
  }
  return "?";
}

Result<std::unique_ptr<Runtime>> make_runtime(const proto::ContainerSpec& spec,
                                              const std::vector<std::string>& env,
                                              const std::string& hostname) {
  using R = Result<std::unique_ptr<Runtime>>;
  if (spec.image.empty()) {
    return std::unique_ptr<Runtime>(std::make_unique<NativeRuntime>(hostname));
  }
  const std::vector<RuntimeKind> all = {RuntimeKind::kPodman, RuntimeKind::kDocker,
                                        RuntimeKind::kApptainer, RuntimeKind::kEnroot};
  std::vector<RuntimeKind> wanted;
  for (auto k : all) {
    if (spec.runtime == "auto" || spec.runtime == runtime_name(k)) wanted.push_back(k);
  }
  if (wanted.empty()) {
    return R::failure("unknown container runtime '" + spec.runtime + "'", ErrorKind::kInput);
  }
  for (auto k : wanted) {
    const std::string program = find_program(runtime_name(k), env, "");
    if (program.empty()) continue;
    switch (k) {
      case RuntimeKind::kPodman:
      case RuntimeKind::kDocker:
        return std::unique_ptr<Runtime>(std::make_unique<OciRuntime>(k, program, spec));
      case RuntimeKind::kApptainer:
        return std::unique_ptr<Runtime>(std::make_unique<ApptainerRuntime>(program, spec));
      case RuntimeKind::kEnroot:
        return std::unique_ptr<Runtime>(std::make_unique<EnrootRuntime>(program, spec));
      case RuntimeKind::kNative:
        break;
    }
  }
  if (spec.runtime == "auto") {
    return R::failure("no container runtime on " + hostname +
                      " for --container-image (looked for podman, docker, apptainer and "
                      "enroot on PATH)");
  }
  return R::failure("container runtime '" + spec.runtime + "' not found on " + hostname +
                    " (not on PATH; --container-runtime chose it)");
}

NodeGpus find_node_gpus(const std::string& root) {
  NodeGpus gpus;
  std::error_code ec;
  gpus.present = std::filesystem::exists(root + "/dev/nvidiactl", ec);
  if (!gpus.present) return gpus;
  // nvidia-ctk writes its spec (kind: nvidia.com/gpu) to either folder.
  for (const char* dir : {"/etc/cdi", "/var/run/cdi"}) {
    std::vector<std::filesystem::path> files;
    for (const auto& entry : std::filesystem::directory_iterator(root + dir, ec)) {
      const auto ext = entry.path().extension();
      if ((ext == ".yaml" || ext == ".json") && entry.is_regular_file(ec))
        files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& file : files) {
      std::ifstream in(file);
      const std::string text((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
      if (text.find("nvidia.com/gpu") != std::string::npos) {
        gpus.cdi_spec = file.string();
        return gpus;
      }
    }
  }
  return gpus;
}

void add_nvidia_hook_env(std::vector<std::string>& env) {
  for (const char* entry :
       {"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"}) {
    const std::string name = name_of(entry);
    if (std::none_of(env.begin(), env.end(),
                     [&](const std::string& e) { return name_of(e) == name; }))
      env.emplace_back(entry);
  }
}

std::string container_name(const std::string& job_id, int node_rank) {
  return "dlaunch-" + job_id + "-node" + std::to_string(node_rank);
}

std::vector<proto::ContainerMount> container_mounts(const proto::ContainerSpec& spec,
                                                    const RuntimeNode& node) {
  std::vector<proto::ContainerMount> out;
  std::set<std::string> targets;
  const auto add = [&](proto::ContainerMount m) {
    if (m.source.empty() || !targets.insert(m.target).second) return;
    out.push_back(std::move(m));
  };
  // The user's own first in the set of targets: theirs win a clash.
  std::vector<proto::ContainerMount> user;
  for (const auto& text : spec.mounts) {
    if (auto m = proto::parse_container_mount(text)) user.push_back(*m);
  }
  for (const auto& m : user) targets.insert(m.target);
  for (const auto& d : node.job_dirs) add({.source = d, .target = d});
  add({.source = node.workdir, .target = node.workdir});
  if (spec.mount_home) add({.source = node.home, .target = node.home});
  for (auto& m : user) out.push_back(std::move(m));
  return out;
}

std::vector<std::string> layered_environment(const std::vector<std::string>& agent_env,
                                             const std::vector<std::string>& image_env,
                                             const std::vector<std::string>& keep_host) {
  std::vector<std::string> out = agent_env;
  for (const auto& e : image_env) {
    const std::string name = name_of(e);
    if (name.empty() || name == "HOSTNAME" ||
        std::find(keep_host.begin(), keep_host.end(), name) != keep_host.end())
      continue;
    std::erase_if(out, [&](const std::string& a) { return name_of(a) == name; });
    out.push_back(e);
  }
  return out;
}

}  // namespace dlaunch::agent
