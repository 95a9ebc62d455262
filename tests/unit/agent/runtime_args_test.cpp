// The container runtimes' command lines (agent/runtime/), built apart from
// running them: podman and docker are run for real by
// tests/integration/container_test.cpp; apptainer and enroot are not
// packaged for Debian 12, so these lines are all that is checked of them.
// Also the command runner they share, with real processes.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dlaunch/proc_stat.h"
#include "dlaunch/proto/container.h"
#include "runtime/command.h"
#include "runtime/oci_runtime.h"
#include "runtime/runtime.h"

namespace {

using dlaunch::agent::RuntimeKind;
using dlaunch::agent::RuntimeNode;
using dlaunch::proto::ContainerSpec;
using Args = std::vector<std::string>;

RuntimeNode runtime_node(uid_t uid) {
  return RuntimeNode{.job_id = "j1",
                     .node_rank = 1,
                     .hostname = "h",
                     .workdir = "/home/u/proj",
                     .job_dirs = {"/tmp/dlaunch-j1-node1-abc"},
                     .agent_pid = 4321,
                     .agent_start_ticks = 77,
                     .keepalive = "/opt/dlaunch/bin/dlaunch-keepalive",
                     .uid = uid,
                     .gid = uid == 0 ? 0U : 100U,
                     .home = "/home/u"};
}

ContainerSpec spec() {
  ContainerSpec s;
  s.image = "localhost/img:1";
  s.mounts = {"/data:/data:ro", "/scratch"};
  return s;
}

// Where `what` starts in `all` as a contiguous run; npos when it does not.
std::size_t find_run(const Args& all, const Args& what) {
  auto it = std::search(all.begin(), all.end(), what.begin(), what.end());
  return it == all.end() ? std::string::npos : static_cast<std::size_t>(it - all.begin());
}

TEST(RuntimeArgs, PodmanAsRootRunsTheKeepaliveWithHostNamespacesLabelsAndMounts) {
  const Args a = dlaunch::agent::oci_run_args(RuntimeKind::kPodman, "/usr/bin/podman", spec(),
                                              runtime_node(0));
  const Args want = {"/usr/bin/podman",
                     "run",
                     "-d",
                     "--rm",
                     "--name",
                     "dlaunch-j1-node1",
                     "--label",
                     "dlaunch.job=j1",
                     "--label",
                     "dlaunch.node=1",
                     "--label",
                     "dlaunch.agent=4321.77",
                     "--network",
                     "host",
                     "--ipc",
                     "host",
                     "--pid",
                     "host",
                     "--pull",
                     "never",
                     "--entrypoint",
                     "/.dlaunch/keepalive",
                     "-v",
                     "/opt/dlaunch/bin/dlaunch-keepalive:/.dlaunch/keepalive:ro",
                     "-v",
                     "/tmp/dlaunch-j1-node1-abc:/tmp/dlaunch-j1-node1-abc",
                     "-v",
                     "/home/u/proj:/home/u/proj",
                     "-v",
                     "/data:/data:ro",
                     "-v",
                     "/scratch:/scratch",
                     "localhost/img:1",
                     "4321"};
  EXPECT_EQ(a, want);
}

// --container-shm-size: a private IPC namespace with a /dev/shm of that size
// instead of the host's; apptainer and enroot have no such choice.
TEST(RuntimeArgs, AShmSizeGivesTheContainerAPrivateDevShmOfThatSize) {
  auto s = spec();
  s.shm_size = "16g";
  for (const auto kind : {RuntimeKind::kPodman, RuntimeKind::kDocker}) {
    const Args a = dlaunch::agent::oci_run_args(kind, "rt", s, runtime_node(0));
    EXPECT_NE(find_run(a, {"--network", "host", "--ipc", "private", "--shm-size", "16g", "--pid",
                           "host"}),
              std::string::npos);
    EXPECT_EQ(find_run(a, {"--ipc", "host"}), std::string::npos);
  }
  EXPECT_EQ(*dlaunch::proto::parse_shm_size("16g"), 16ULL << 30);
  EXPECT_EQ(*dlaunch::proto::parse_shm_size("512M"), 512ULL << 20);
  EXPECT_EQ(*dlaunch::proto::parse_shm_size("1048576"), 1ULL << 20);
  EXPECT_EQ(*dlaunch::proto::parse_shm_size("1024g"), 1ULL << 40);
  for (const char* bad :
       {"", "g", "16 g", "16gb", "-1g", "1.5g", "16t", "1k", "1025g", "99999999999999g"}) {
    EXPECT_FALSE(dlaunch::proto::parse_shm_size(bad).ok()) << bad;
  }
  EXPECT_EQ(dlaunch::proto::parse_shm_size("16t").error(),
            "'16t' has an unknown unit: b, k, m or g, e.g. 16g");
}

TEST(RuntimeArgs, PodmanRootlessKeepsTheUsersIdsAndDockerNamesThem) {
  const Args p =
      dlaunch::agent::oci_run_args(RuntimeKind::kPodman, "podman", spec(), runtime_node(1000));
  EXPECT_NE(find_run(p, {"--userns", "keep-id"}), std::string::npos);
  EXPECT_EQ(find_run(p, {"--user"}), std::string::npos);
  const Args d =
      dlaunch::agent::oci_run_args(RuntimeKind::kDocker, "docker", spec(), runtime_node(1000));
  EXPECT_NE(find_run(d, {"--user", "1000:100"}), std::string::npos);
  EXPECT_EQ(find_run(d, {"--userns", "keep-id"}), std::string::npos);
  // As root, root inside: neither.
  const Args r =
      dlaunch::agent::oci_run_args(RuntimeKind::kDocker, "docker", spec(), runtime_node(0));
  EXPECT_EQ(find_run(r, {"--user"}), std::string::npos);
}

TEST(RuntimeArgs, PullPolicyHomeAndAUserMountOverTheWorkdirComeThrough) {
  ContainerSpec s = spec();
  s.pull = "never";
  s.mount_home = true;
  s.mounts = {"/elsewhere:/home/u/proj"};  // the user's mount wins the target
  const Args a = dlaunch::agent::oci_run_args(RuntimeKind::kPodman, "podman", s, runtime_node(0));
  EXPECT_NE(find_run(a, {"--pull", "never"}), std::string::npos);
  EXPECT_NE(find_run(a, {"-v", "/home/u:/home/u"}), std::string::npos);
  // Whatever the policy, `run` pulls nothing: the agent pulled first.
  for (const char* policy : {"always", "missing"}) {
    s.pull = policy;
    EXPECT_NE(
        find_run(dlaunch::agent::oci_run_args(RuntimeKind::kDocker, "docker", s, runtime_node(0)),
                 {"--pull", "never"}),
        std::string::npos)
        << policy;
  }
  EXPECT_NE(find_run(a, {"-v", "/elsewhere:/home/u/proj"}), std::string::npos);
  EXPECT_EQ(find_run(a, {"-v", "/home/u/proj:/home/u/proj"}), std::string::npos);
}

// A container of the same name whose label names a running agent belongs to
// another job with the same id: never removed. Gone, reused or unlabeled:
// a leftover.
TEST(RuntimeArgs, OnlyAContainerOfARunningAgentIsNotALeftover) {
  const auto self = std::to_string(::getppid());  // a process that runs: the test's parent
  const auto ticks = std::to_string(dlaunch::process_start_ticks(::getppid()));
  EXPECT_EQ(dlaunch::agent::running_agent_of_label(self + "." + ticks + "\n"), ::getppid());
  EXPECT_EQ(dlaunch::agent::running_agent_of_label(self + "." + ticks + "1"), 0);  // reused pid
  EXPECT_EQ(dlaunch::agent::running_agent_of_label(
                std::to_string(::getpid()) + "." +
                std::to_string(dlaunch::process_start_ticks(::getpid()))),
            0);  // this agent's own
  for (const char* bad : {"", "<no value>", "12", "x.y", "-1.5", "0.0"}) {
    EXPECT_EQ(dlaunch::agent::running_agent_of_label(bad), 0) << bad;
  }
}

TEST(RuntimeArgs, TheImageIsLookedForThenPulledByTheRuntimesOwnCommands) {
  EXPECT_EQ(dlaunch::agent::oci_image_present_args(RuntimeKind::kPodman, "podman", "r:5000/i:1"),
            (Args{"podman", "image", "exists", "r:5000/i:1"}));
  EXPECT_EQ(dlaunch::agent::oci_image_present_args(RuntimeKind::kDocker, "docker", "i:1"),
            (Args{"docker", "image", "inspect", "--format", "{{.Id}}", "i:1"}));
  EXPECT_EQ(dlaunch::agent::oci_pull_args("/usr/bin/podman", "r:5000/i:1"),
            (Args{"/usr/bin/podman", "pull", "-q", "r:5000/i:1"}));
}

TEST(RuntimeArgs, RemovalNeverWaitsForAStop) {
  EXPECT_EQ(dlaunch::agent::oci_remove_args(RuntimeKind::kPodman, "podman", "c"),
            (Args{"podman", "rm", "-f", "--ignore", "-t", "0", "c"}));
  EXPECT_EQ(dlaunch::agent::oci_remove_args(RuntimeKind::kDocker, "docker", "c"),
            (Args{"docker", "rm", "-f", "c"}));
}

// What the guard runs if the agent dies: podman removes the container this
// agent labelled, whatever holds the name.
TEST(RuntimeArgs, TheGuardRemovesThisAgentsContainerByItsLabel) {
  ContainerSpec s = spec();
  dlaunch::agent::OciRuntime podman(RuntimeKind::kPodman, "/usr/bin/podman", s);
  EXPECT_EQ(
      podman.removal_command(runtime_node(0)),
      (Args{"/usr/bin/podman", "rm", "-f", "-t", "0", "--filter", "label=dlaunch.agent=4321.77"}));
  dlaunch::agent::OciRuntime docker(RuntimeKind::kDocker, "/usr/bin/docker", s);
  EXPECT_EQ(docker.removal_command(runtime_node(0)),
            (Args{"/usr/bin/docker", "rm", "-f", "dlaunch-j1-node1"}));
}

TEST(RuntimeArgs, ApptainerExecBindsTheJobsFoldersAndKeepsTheNamedVariables) {
  ContainerSpec s = spec();
  s.env = {"NCCL_DEBUG"};
  const Args a = dlaunch::agent::apptainer_args("/usr/bin/apptainer", s, runtime_node(1000),
                                                {"NCCL_DEBUG=INFO", "RANK=3"}, {"python3", "t.py"});
  const Args want = {"/usr/bin/apptainer",
                     "exec",
                     "--no-home",
                     "--bind",
                     "/tmp/dlaunch-j1-node1-abc:/tmp/dlaunch-j1-node1-abc",
                     "--bind",
                     "/home/u/proj:/home/u/proj",
                     "--bind",
                     "/data:/data:ro",
                     "--bind",
                     "/scratch:/scratch",
                     "--pwd",
                     "/home/u/proj",
                     "--env",
                     "NCCL_DEBUG=INFO",
                     "localhost/img:1",
                     "python3",
                     "t.py"};
  EXPECT_EQ(a, want);
  s.entrypoint = true;
  s.mount_home = true;
  s.workdir = "/w";
  const Args b = dlaunch::agent::apptainer_args("apptainer", s, runtime_node(1000), {}, {"x"});
  EXPECT_EQ(b[1], "run");  // the image's runscript
  EXPECT_EQ(find_run(b, {"--no-home"}), std::string::npos);
  EXPECT_EQ(find_run(b, {"--bind", "/home/u:/home/u"}), std::string::npos);  // apptainer's own
  EXPECT_NE(find_run(b, {"--pwd", "/w"}), std::string::npos);
}

TEST(RuntimeArgs, EnrootCreatesOnceStartsEachRankWithItsEnvironmentAndRemoves) {
  ContainerSpec s = spec();
  s.image = "/images/torch.sqsh";
  EXPECT_EQ(
      dlaunch::agent::enroot_create_args("enroot", s, "dlaunch-j1-node1"),
      (Args{"enroot", "create", "--force", "--name", "dlaunch-j1-node1", "/images/torch.sqsh"}));
  const Args a = dlaunch::agent::enroot_start_args("enroot", s, runtime_node(0), "dlaunch-j1-node1",
                                                   {"RANK=3", "PATH=/bin"}, {"python3", "t.py"});
  const Args want = {"enroot",
                     "start",
                     "--rw",
                     "--root",
                     "--mount",
                     "/tmp/dlaunch-j1-node1-abc:/tmp/dlaunch-j1-node1-abc:none:x-create=auto,rbind",
                     "--mount",
                     "/home/u/proj:/home/u/proj:none:x-create=auto,rbind",
                     "--mount",
                     "/data:/data:none:x-create=auto,rbind,ro",
                     "--mount",
                     "/scratch:/scratch:none:x-create=auto,rbind",
                     "--env",
                     "RANK",
                     "--env",
                     "PATH",
                     "dlaunch-j1-node1",
                     "/bin/sh",
                     "-c",
                     "cd \"$0\" && exec \"$@\"",
                     "/home/u/proj",
                     "python3",
                     "t.py"};
  EXPECT_EQ(a, want);
  EXPECT_EQ(
      find_run(dlaunch::agent::enroot_start_args("enroot", s, runtime_node(1000), "n", {}, {"x"}),
               {"--root"}),
      std::string::npos);
  EXPECT_EQ(dlaunch::agent::enroot_remove_args("enroot", "n"),
            (Args{"enroot", "remove", "--force", "n"}));
}

TEST(RuntimeArgs, ANodesGpusGoIntoTheContainerTheWayEachRuntimeTakesThem) {
  RuntimeNode n = runtime_node(1000);
  // No GPU on the node: nothing asked of any runtime.
  for (const auto kind : {RuntimeKind::kPodman, RuntimeKind::kDocker}) {
    const Args a = dlaunch::agent::oci_run_args(kind, "rt", spec(), n);
    EXPECT_EQ(find_run(a, {"--device", "nvidia.com/gpu=all"}), std::string::npos);
    EXPECT_EQ(find_run(a, {"--gpus", "all"}), std::string::npos);
    EXPECT_EQ(find_run(a, {"-e", "NVIDIA_VISIBLE_DEVICES=all"}), std::string::npos);
  }
  EXPECT_EQ(find_run(dlaunch::agent::apptainer_args("a", spec(), n, {}, {"x"}), {"--nv"}),
            std::string::npos);

  n.gpus.present = true;
  n.gpus.cdi_spec = "/etc/cdi/nvidia.yaml";
  const auto before_image = [](const Args& a, const Args& what) {
    const auto at = find_run(a, what);
    return at != std::string::npos && at < find_run(a, {"localhost/img:1"});
  };
  // podman: the CDI spec's devices; docker: its --gpus (nvidia-container-toolkit).
  EXPECT_TRUE(before_image(dlaunch::agent::oci_run_args(RuntimeKind::kPodman, "podman", spec(), n),
                           {"--device", "nvidia.com/gpu=all"}));
  EXPECT_TRUE(before_image(dlaunch::agent::oci_run_args(RuntimeKind::kDocker, "docker", spec(), n),
                           {"--gpus", "all"}));
  // podman without a CDI spec: what NVIDIA's OCI hook acts on.
  n.gpus.cdi_spec.clear();
  const Args hook = dlaunch::agent::oci_run_args(RuntimeKind::kPodman, "podman", spec(), n);
  EXPECT_TRUE(before_image(hook, {"-e", "NVIDIA_VISIBLE_DEVICES=all", "-e",
                                  "NVIDIA_DRIVER_CAPABILITIES=compute,utility"}));
  EXPECT_EQ(find_run(hook, {"--device", "nvidia.com/gpu=all"}), std::string::npos);
  // apptainer: --nv, before the image.
  EXPECT_TRUE(before_image(dlaunch::agent::apptainer_args("a", spec(), n, {}, {"x"}), {"--nv"}));
  // enroot's hook reads the rank's environment: added where the rank has none.
  Args env = {"RANK=0", "NVIDIA_DRIVER_CAPABILITIES=all"};
  dlaunch::agent::add_nvidia_hook_env(env);
  EXPECT_EQ(env, (Args{"RANK=0", "NVIDIA_DRIVER_CAPABILITIES=all", "NVIDIA_VISIBLE_DEVICES=all"}));
}

TEST(RuntimeArgs, TheNodesGpusAreFoundByTheDriversDeviceAndCdiSpec) {
  char tmpl[] = "/tmp/dlaunch-gpus-XXXXXX";  // mkdtemp replaces the six X
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string root = tmpl;
  const auto write = [&](const std::string& path, const std::string& text) {
    const std::string full = root + path;
    std::filesystem::create_directories(std::filesystem::path(full).parent_path());
    std::ofstream(full) << text;
  };
  auto g = dlaunch::agent::find_node_gpus(root);
  EXPECT_FALSE(g.present);
  // A CDI spec alone is no GPU; a spec of another kind is no spec for GPUs.
  write("/etc/cdi/other.yaml", "cdiVersion: 0.5.0\nkind: vendor.com/fpga\n");
  write("/var/run/cdi/nvidia.yaml", "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n");
  EXPECT_FALSE(dlaunch::agent::find_node_gpus(root).present);
  write("/dev/nvidiactl", "");
  g = dlaunch::agent::find_node_gpus(root);
  EXPECT_TRUE(g.present);
  EXPECT_EQ(g.cdi_spec, root + "/var/run/cdi/nvidia.yaml");
  // /etc/cdi first, as nvidia-ctk's default; other files are not specs.
  write("/etc/cdi/nvidia.json", "{\"cdiVersion\":\"0.5.0\",\"kind\":\"nvidia.com/gpu\"}");
  write("/etc/cdi/notes.txt", "nvidia.com/gpu");
  EXPECT_EQ(dlaunch::agent::find_node_gpus(root).cdi_spec, root + "/etc/cdi/nvidia.json");
  std::filesystem::remove_all(root);
}

TEST(RuntimeArgs, ImageVariablesWinOverTheHostsExceptTheNamedOnesAndHostname) {
  const auto env = dlaunch::agent::layered_environment(
      {"PATH=/usr/bin", "HOME=/root", "KEEP=host", "HOSTNAME=h"},
      {"PATH=/opt/conda/bin:/bin", "KEEP=image", "HOSTNAME=abc123", "NEW=1"}, {"KEEP"});
  EXPECT_EQ(env,
            (Args{"HOME=/root", "KEEP=host", "HOSTNAME=h", "PATH=/opt/conda/bin:/bin", "NEW=1"}));
}

TEST(RuntimeArgs, MountsParseAsPyxisWritesThemAndBadOnesSayWhy) {
  auto m = dlaunch::proto::parse_container_mount("/a:/b:ro");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->source, "/a");
  EXPECT_EQ(m->target, "/b");
  EXPECT_TRUE(m->read_only);
  auto same = dlaunch::proto::parse_container_mount("/data");
  ASSERT_TRUE(same);
  EXPECT_EQ(same->target, "/data");
  EXPECT_FALSE(same->read_only);
  for (const char* bad : {"data:/d", "/a:b", "/a:/b:rx", "/a:/b:ro:x", "/a/../b:/c", ""}) {
    EXPECT_FALSE(dlaunch::proto::parse_container_mount(bad)) << bad;
  }
  EXPECT_NE(dlaunch::proto::parse_container_mount("/a:/b:rx").error().find("'rx'"),
            std::string::npos);
  EXPECT_FALSE(dlaunch::proto::split_container_list("/a,,/b", "mount"));
  EXPECT_EQ(dlaunch::proto::split_container_list("/a,/b:/c", "mount").value(),
            (Args{"/a", "/b:/c"}));
}

TEST(RuntimeArgs, AMissingRuntimeIsNamedAndNoImageMeansNative) {
  ContainerSpec s = spec();
  s.runtime = "enroot";
  auto r = dlaunch::agent::make_runtime(s, {"PATH=/nonexistent"}, "nodeA");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(),
            "container runtime 'enroot' not found on nodeA (not on PATH; --container-runtime "
            "chose it)");
  s.runtime = "auto";
  auto any = dlaunch::agent::make_runtime(s, {"PATH=/nonexistent"}, "nodeA");
  ASSERT_FALSE(any);
  EXPECT_NE(any.error().find("no container runtime on nodeA"), std::string::npos);
  auto native = dlaunch::agent::make_runtime(ContainerSpec{}, {"PATH=/nonexistent"}, "nodeA");
  ASSERT_TRUE(native);
  EXPECT_EQ((*native)->kind(), RuntimeKind::kNative);
}

TEST(RuntimeCommand, OutputStatusAndTheDeadline) {
  using std::chrono::milliseconds;
  auto r = dlaunch::agent::run_command({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"},
                                       {"PATH=/bin:/usr/bin"}, milliseconds(10000));
  EXPECT_TRUE(WIFEXITED(r.status));
  EXPECT_EQ(WEXITSTATUS(r.status), 3);
  EXPECT_EQ(r.output, "out\nerr\n");
  EXPECT_NE(dlaunch::agent::describe_failure({"/bin/sh", "-c"}, r).find("exited with 3: out\nerr"),
            std::string::npos);
  const auto start = std::chrono::steady_clock::now();
  auto slow = dlaunch::agent::run_command({"/bin/sleep", "20"}, {}, milliseconds(200));
  EXPECT_TRUE(slow.timed_out);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  auto missing = dlaunch::agent::run_command({"/nonexistent/podman"}, {}, milliseconds(1000));
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.error.find("No such file"), std::string::npos) << missing.error;
}

TEST(RuntimeCommand, ADaemonHoldingTheOutputPipeDoesNotHoldTheCaller) {
  // podman run -d leaves conmon behind: the command's end is its exit.
  const auto start = std::chrono::steady_clock::now();
  auto r = dlaunch::agent::run_command({"/bin/sh", "-c", "(sleep 3 &) ; echo started"},
                                       {"PATH=/bin:/usr/bin"}, std::chrono::milliseconds(10000));
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.output, "started\n");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(2500));
}

}  // namespace
