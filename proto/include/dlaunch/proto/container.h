// What the head asks of each node's container (--container-* options,
// docs/containers.md), carried to the agents in Setup, and the parsing both
// sides share: the head refuses a bad value before anything starts; the agent
// builds the runtime's command lines from the same parts.
//
// Thread safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dlaunch/error.h"

namespace dlaunch::proto {

struct ContainerSpec {
  std::string image;                // empty: no container, the ranks run on the host
  std::string runtime = "auto";     // podman | docker | apptainer | enroot | auto
  std::vector<std::string> mounts;  // "SRC:DST[:ro|:rw]", as --container-mounts
  std::string workdir;              // the ranks' directory inside; empty: the job's, same path
  // Names whose value on the host wins over the image's (pyxis's --container-env).
  std::vector<std::string> env;
  bool mount_home = false;       // the user's home, at the same path
  bool entrypoint = false;       // run the image's entrypoint before each rank's program
  std::string pull = "missing";  // always | missing | never
  // /dev/shm: empty, the host's (host IPC namespace); else a private one of
  // this size (podman and docker --shm-size), as --container-shm-size wrote it.
  std::string shm_size;
};

// The runtimes a user may name, "auto" first.
inline constexpr std::string_view kContainerRuntimes[] = {"auto", "podman", "docker", "apptainer",
                                                          "enroot"};
inline constexpr std::string_view kContainerPullPolicies[] = {"always", "missing", "never"};

struct ContainerMount {
  std::string source;  // absolute, on the host
  std::string target;  // absolute, inside
  bool read_only = false;
};

// One "SRC:DST[:ro|:rw]" of --container-mounts (DST defaults to SRC when only
// SRC is given, as pyxis does); the error names what is wrong with it.
Result<ContainerMount> parse_container_mount(std::string_view text);
// A --container-shm-size value: a positive number of bytes with an optional
// unit b, k, m or g (any case; 1024-based, as docker's), at least 1 MiB and
// at most 1 TiB; the bytes, or what is wrong with it.
Result<std::uint64_t> parse_shm_size(std::string_view text);

// A comma-separated --container-mounts list, split (empty items refused).
Result<std::vector<std::string>> split_container_list(std::string_view text, std::string_view what);

}  // namespace dlaunch::proto
