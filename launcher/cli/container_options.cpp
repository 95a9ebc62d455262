#include "cli/container_options.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#include "dlaunch/text.h"
#include "hostfile/hostfile.h"

namespace dlaunch {

namespace {

std::string one_of(const auto& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : "|") + std::string(n);
  return out;
}

CLI::Validator member_of(const auto& names) {
  std::vector<std::string> list(std::begin(names), std::end(names));
  return CLI::IsMember(list);
}

}  // namespace

void add_container_options(CLI::App& app, Options& o) {
  auto* c = app.add_option_group("Containers");
  c->add_option("--container-image", o.container.image,
                "run every node's ranks in one container of IMAGE (podman, docker: host "
                "network, IPC and PID; the user's uid; the working directory at the same path; "
                "docs/containers.md)")
      ->type_name("IMAGE");
  c->add_option("--container-runtime", o.container.runtime,
                "runtime for --container-image: " + one_of(proto::kContainerRuntimes) +
                    " (auto: the first of podman, docker, apptainer, enroot on each node's PATH)")
      ->capture_default_str()
      ->check(member_of(proto::kContainerRuntimes));
  c->add_option("--container-mounts", o.container_mounts,
                "also mount these host paths: SRC[:DST[:ro|rw]],... (absolute paths)")
      ->type_name("SRC:DST[:ro],...");
  c->add_option("--container-workdir", o.container.workdir,
                "the ranks' working directory inside (default: the job's, mounted at the same "
                "path)")
      ->type_name("DIR");
  c->add_option("--container-env", o.container_env,
                "variables whose host value wins over the image's: NAME,... (dlaunch's own, "
                "such as RANK, always win)")
      ->type_name("NAME,...");
  c->add_flag("--container-mount-home", o.container.mount_home,
              "mount the user's home directory at the same path")
      ->excludes(c->add_flag_callback(
          "--no-container-mount-home", [&o] { o.container.mount_home = false; },
          "do not mount the user's home directory (the default)"));
  c->add_flag("--container-entrypoint", o.container.entrypoint,
              "run the image's entrypoint with each rank's program as its arguments (default: "
              "the program alone)");
  c->add_option("--container-shm-size", o.container.shm_size,
                "a private /dev/shm of SIZE for each node's container (podman, docker), e.g. "
                "16g; default: the host's /dev/shm (host IPC)")
      ->type_name("SIZE");
  c->add_option("--container-pull", o.container.pull,
                "when to pull the image: " + one_of(proto::kContainerPullPolicies))
      ->capture_default_str()
      ->check(member_of(proto::kContainerPullPolicies));
}

void finish_container_options(const CLI::App& app, Options& o) {
  const char* const others[] = {
      "--container-runtime",    "--container-mounts",     "--container-workdir",
      "--container-env",        "--container-mount-home", "--no-container-mount-home",
      "--container-entrypoint", "--container-pull",       "--container-shm-size"};
  if (app.count("--container-image") > 0 && o.container.image.empty()) {
    throw InputError({"--container-image"}, "", "the image name is empty",
                     "give an image, e.g. --container-image localhost/train:1");
  }
  if (o.container.image.empty()) {
    const char* const* given = std::find_if(std::begin(others), std::end(others),
                                            [&](const char* name) { return app.count(name) > 0; });
    if (given == std::end(others)) return;
    // A hostfile's `container:` may name the image (the head driver checks
    // once the hostfile is read); the per-node mode has none.
    if (o.pernode.enabled) {
      throw InputError({*given}, "", "needs --container-image", "name the image the ranks run in");
    }
    o.container_option_alone = *given;
  } else if (o.container.image.find_first_of(" \t\n") != std::string::npos ||
             o.container.image.front() == '-') {
    throw InputError({"--container-image"}, "", "'" + o.container.image + "' is not an image name");
  }
  if (!o.container_mounts.empty()) {
    auto items = proto::split_container_list(o.container_mounts, "mount");
    if (!items) throw InputError({"--container-mounts"}, "", items.error());
    for (const auto& item : *items) {
      if (auto m = proto::parse_container_mount(item); !m) {
        throw InputError({"--container-mounts"}, "", m.error(),
                         "write SRC[:DST[:ro|rw]] with absolute paths, commas between mounts");
      }
    }
    o.container.mounts = std::move(*items);
  }
  if (app.count("--container-shm-size") > 0) {
    if (auto size = proto::parse_shm_size(o.container.shm_size); !size) {
      throw InputError({"--container-shm-size"}, "", size.error(),
                       "a size such as 512m or 16g (NCCL wants a few GiB per GPU)");
    }
  }
  if (!o.container.workdir.empty() && o.container.workdir.front() != '/') {
    throw InputError({"--container-workdir"}, "",
                     "'" + o.container.workdir + "' is not an absolute path");
  }
  if (!o.container_env.empty()) {
    auto names = proto::split_container_list(o.container_env, "name");
    if (!names) throw InputError({"--container-env"}, "", names.error());
    for (const auto& n : *names) {
      if (!is_env_name(n)) {
        throw InputError({"--container-env"}, "", "'" + n + "' is not a variable name",
                         "give names only (NAME,NAME2): their values come from the host");
      }
    }
    o.container.env = std::move(*names);
  }
}

}  // namespace dlaunch
