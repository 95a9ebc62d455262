// Per-node mode's pure parts: which mode the command line selects, torchrun's
// spellings, what is refused by name, the program under Python, --rdzv-conf,
// --nproc-per-node and the node's plan (global ranks, torchrun's environment);
// and the other peers' spellings (DropIn: mpirun, horovodrun, DeepSpeed).
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cli/options.h"
#include "cli/peer_options.h"
#include "drivers/pernode.h"
#include "hostfile/hostfile.h"
#include "pernode/rendezvous.h"
#include "plan/plan.h"
#include "plan/user_env.h"
#include "seams/scoped_env.h"

using namespace dlaunch;

namespace {

// parse_options on these words; exit code 2 stands for a usage error printed
// by CLI11, -1 for parsed.
struct Parsed {
  Options o;
  int exit = -1;
  std::string error;  // an InputError's message
};

Parsed parse(std::vector<std::string> words) {
  words.insert(words.begin(), "dlaunch");
  std::vector<char*> argv;
  argv.reserve(words.size());
  for (auto& w : words) argv.push_back(w.data());
  Parsed p;
  int code = 0;
  try {
    if (!parse_options(static_cast<int>(argv.size()), argv.data(), p.o, code)) p.exit = code;
  } catch (const InputError& e) {
    p.exit = 2;
    p.error = std::string(e.what());
  }
  return p;
}

std::string env_of(const EnvList& env, const std::string& name) {
  for (const auto& [k, v] : env) {
    if (k == name) return v;
  }
  return "<unset>";
}

}  // namespace

TEST(PerNodeOptions, NodeOptionsSelectTheModeInBothSpellings) {
  auto p = parse({"--nnodes", "2", "--nproc_per_node", "4", "--node_rank", "1", "--master_addr",
                  "10.0.0.1", "--master_port", "29501", "./prog"});
  ASSERT_EQ(p.exit, -1) << p.error;
  EXPECT_TRUE(p.o.pernode.enabled);
  EXPECT_EQ(p.o.pernode.nproc, "4");
  EXPECT_EQ(p.o.pernode.node_rank, 1);
  EXPECT_EQ(p.o.pernode.rdzv_backend, "static");
  EXPECT_EQ(p.o.master_addr, "10.0.0.1");
  EXPECT_EQ(p.o.master_port, 29501);
  p = parse({"--nnodes", "1:4", "--rdzv-endpoint", "h:29400", "--max-restarts", "3", "./prog"});
  ASSERT_EQ(p.exit, -1) << p.error;
  EXPECT_EQ(p.o.pernode.rdzv_backend, "c10d");
  EXPECT_EQ(p.o.pernode.min_nodes, 1);
  EXPECT_EQ(p.o.pernode.max_nodes, 4);
  EXPECT_EQ(p.o.max_restarts, 3);
  // --nproc-per-node alone is torchrun on one node; with hosts, the head mode's.
  p = parse({"--nproc-per-node", "2", "./prog"});
  EXPECT_TRUE(p.o.pernode.enabled);
  p = parse({"-H", "a:4,b:4", "--nproc-per-node", "2", "./prog"});
  ASSERT_EQ(p.exit, -1) << p.error;
  EXPECT_FALSE(p.o.pernode.enabled);
  EXPECT_EQ(p.o.filter.nproc_per_node, 2);
  p = parse({"-H", "a:4", "--nproc-per-node", "gpu", "./prog"});
  EXPECT_EQ(p.exit, 2);
  EXPECT_NE(p.error.find("--nproc-per-node"), std::string::npos) << p.error;
}

TEST(PerNodeOptions, ThePythonProgramRulesOfTorchrun) {
  auto p = parse({"--standalone", "train.py", "--lr", "1"});
  ASSERT_EQ(p.exit, -1) << p.error;
  EXPECT_EQ(p.o.command,
            (std::vector<std::string>{pernode_python(), "-u", "train.py", "--lr", "1"}));
  p = parse({"--standalone", "-m", "pkg.train", "--lr", "1"});
  EXPECT_EQ(p.o.command,
            (std::vector<std::string>{pernode_python(), "-u", "-m", "pkg.train", "--lr", "1"}));
  p = parse({"--standalone", "--no-python", "tool.py"});
  EXPECT_EQ(p.o.command, (std::vector<std::string>{"tool.py"}));
  p = parse({"--standalone", "./prog"});
  EXPECT_EQ(p.o.command, (std::vector<std::string>{"./prog"}));
  p = parse({"--standalone", "--run-path", "script"});
  EXPECT_EQ(p.o.command, (std::vector<std::string>{pernode_python(), "-u", "script"}));
}

// Issue 29: the first command lines users bring from the peers.
TEST(DropIn, ADotPyRunsUnderPythonInTheHeadNodeModeToo) {
  auto p = parse({"-H", "hosts.yaml", "train.py", "--lr", "1"});
  ASSERT_EQ(p.exit, -1) << p.error;
  EXPECT_FALSE(p.o.pernode.enabled);
  EXPECT_EQ(p.o.command,
            (std::vector<std::string>{pernode_python(), "-u", "train.py", "--lr", "1"}));
  p = parse({"-n", "2", "--no-python", "tool.py"});
  ASSERT_EQ(p.exit, -1) << p.error;
  EXPECT_FALSE(p.o.pernode.enabled);
  EXPECT_EQ(p.o.command, (std::vector<std::string>{"tool.py"}));
  p = parse({"-H", "a:2", "-m", "pkg.train"});
  ASSERT_EQ(p.exit, -1) << p.error;
  EXPECT_EQ(p.o.command, (std::vector<std::string>{pernode_python(), "-u", "-m", "pkg.train"}));
  // Each app of an MPMD job.
  p = parse({"-n", "1", "server.py", ":", "-n", "2", "./worker"});
  ASSERT_EQ(p.exit, -1) << p.error;
  ASSERT_EQ(p.o.apps.size(), 2u);
  EXPECT_EQ(p.o.apps[0].command, (std::vector<std::string>{pernode_python(), "-u", "server.py"}));
  EXPECT_EQ(p.o.apps[1].command, (std::vector<std::string>{"./worker"}));
  EXPECT_EQ(p.o.command, p.o.apps[0].command);
}

TEST(DropIn, OpenMpisSingleDashLongOptionsAreItsOwn) {
  auto p = parse({"-np", "4", "./prog"});
  ASSERT_EQ(p.exit, -1) << p.error;
  EXPECT_EQ(p.o.np, 4);
  EXPECT_EQ(p.o.command, (std::vector<std::string>{"./prog"}));
  // The program's own arguments are its own, whatever they look like.
  p = parse({"-np", "2", "-x", "A=1", "-wdir", "/tmp", "-tag-output", "./prog", "-np", "3", "-wdir",
             "x"});
  ASSERT_EQ(p.exit, -1) << p.error;
  EXPECT_EQ(p.o.np, 2);
  EXPECT_EQ(p.o.workdir, "/tmp");
  EXPECT_EQ(p.o.command, (std::vector<std::string>{"./prog", "-np", "3", "-wdir", "x"}));
  p = parse({"-machinefile", "hosts.txt", "-n4", "./prog"});
  ASSERT_EQ(p.exit, -1) << p.error;
  EXPECT_EQ(p.o.hostfile, "hosts.txt");
  EXPECT_EQ(p.o.np, 4);
  p = parse({"--np=3", "-hostfile=h", "./prog"});
  ASSERT_EQ(p.exit, -1) << p.error;
  EXPECT_EQ(p.o.np, 3);
  EXPECT_EQ(p.o.hostfile, "h");
  // A misspelt one is still said to be unknown.
  p = parse({"-np", "2", "-tag-ouput", "./prog"});
  EXPECT_EQ(p.exit, 2);
  EXPECT_NE(p.error.find("unknown option"), std::string::npos) << p.error;
}

TEST(DropIn, TorchrunsNewestOptionsMeanWhatTheyMeanThere) {
  // --shutdown-timeout is the kill grace; TORCH_ELASTIC_SHUTDOWN_TIMEOUT too.
  auto p = parse({"--standalone", "--shutdown-timeout", "12", "./prog"});
  ASSERT_EQ(p.exit, -1) << p.error;
  EXPECT_EQ(p.o.kill_grace_s, 12);
  ::setenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "7", 1);
  p = parse({"--standalone", "./prog"});
  EXPECT_EQ(p.o.kill_grace_s, 7);
  p = parse({"--standalone", "--kill-grace", "3", "./prog"});
  EXPECT_EQ(p.o.kill_grace_s, 3);  // dlaunch's own option wins over the variable
  ::unsetenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT");
  p = parse({"--standalone", "--shutdown-timeout", "2", "--kill-grace", "3", "./prog"});
  EXPECT_EQ(p.exit, 2);
  // Built-in values are accepted, others refused by name.
  p = parse({"--standalone", "--logs-specs", "default", "--event-log-handler", "console", "./p"});
  EXPECT_EQ(p.exit, -1) << p.error;
  p = parse({"--standalone", "--logs-specs", "mine", "./p"});
  EXPECT_EQ(p.exit, 2);
  EXPECT_NE(p.error.find("'mine': dlaunch has torchrun's built-in `default` only"),
            std::string::npos)
      << p.error;
  p = parse({"--standalone", "--event-log-handler", "scuba", "./p"});
  EXPECT_EQ(p.exit, 2);
  // Every torchrun option from PET_<NAME>, as torchrun reads them.
  ::setenv("PET_NNODES", "2", 1);
  ::setenv("PET_RDZV_ENDPOINT", "node0:29411", 1);
  ::setenv("PET_NPROC_PER_NODE", "3", 1);
  p = parse({"./prog"});
  ::unsetenv("PET_NNODES");
  ::unsetenv("PET_RDZV_ENDPOINT");
  ::unsetenv("PET_NPROC_PER_NODE");
  ASSERT_EQ(p.exit, -1) << p.error;
  EXPECT_TRUE(p.o.pernode.enabled);
  EXPECT_EQ(p.o.pernode.max_nodes, 2);
  EXPECT_EQ(p.o.pernode.rdzv_endpoint, "node0:29411");
  EXPECT_EQ(p.o.pernode.nproc, "3");
  // --numa-binding: near each rank's GPU, as dlaunch's --bind-to gpu and kin.
  for (const auto& [mode, bind] :
       std::vector<std::pair<std::string, std::string>>{{"node", "gpu"},
                                                        {"socket", "gpu-package"},
                                                        {"exclusive", "gpu-exclusive"},
                                                        {"core-complex", "gpu-l3cache"}}) {
    p = parse({"--standalone", "--numa-binding", mode, "./prog"});
    ASSERT_EQ(p.exit, -1) << p.error;
    EXPECT_EQ(p.o.bind_to, bind) << mode;
  }
  p = parse({"--standalone", "--numa-binding", "node", "--bind-to", "core", "./prog"});
  EXPECT_EQ(p.exit, 2);
  // --virtual-local-rank: LOCAL_RANK 0, each rank its own device.
  p = parse({"--standalone", "--virtual-local-rank", "./prog"});
  ASSERT_EQ(p.exit, -1) << p.error;
  EXPECT_TRUE(p.o.pernode.virtual_local_rank);
}

TEST(PerNodePlan, AVirtualLocalRankSeesOnlyItsOwnDevice) {
  Hostfile hf = local_hostfile(3);
  hf.hosts.front().gpus = {4, 5, 6};
  PlanOptions po;
  po.command = {"./prog"};
  po.virtual_local_rank = true;
  const JobPlan plan = make_plan(hf, po);
  const NodePlan& node = plan.nodes.front();
  for (const auto& r : node.ranks) {
    const EnvList env = rank_environment(plan, node, r);
    EXPECT_EQ(env_of(env, "LOCAL_RANK"), "0");
    EXPECT_EQ(env_of(env, "CUDA_VISIBLE_DEVICES"), std::to_string(4 + r.local_rank));
  }
  po.virtual_local_rank = false;
  const JobPlan plain = make_plan(hf, po);
  EXPECT_EQ(env_of(rank_environment(plain, plain.nodes.front(), plain.nodes.front().ranks[2]),
                   "LOCAL_RANK"),
            "2");
}

TEST(DropIn, MpirunsWaysToCountRanks) {
  for (const auto& words : std::vector<std::vector<std::string>>{
           {"-c", "3", "p"}, {"--n", "3", "p"}, {"-np", "3", "p"}, {"--np=3", "p"}}) {
    auto p = parse(words);
    ASSERT_EQ(p.exit, -1) << words[0] << ": " << p.error;
    EXPECT_EQ(p.o.np, 3) << words[0];
  }
  // Ranks per node: -N, -npernode, --pernode, --map-by ppr:N:node; the head-node mode.
  for (const auto& words :
       std::vector<std::vector<std::string>>{{"-H", "a:4,b:4", "-N", "2", "p"},
                                             {"-H", "a:4,b:4", "-npernode", "2", "p"},
                                             {"-H", "a:4,b:4", "--map-by", "ppr:2:node", "p"},
                                             {"-H", "a:4,b:4", "-map-by", "ppr:2:node", "p"}}) {
    auto p = parse(words);
    ASSERT_EQ(p.exit, -1) << words[2] << ": " << p.error;
    EXPECT_FALSE(p.o.pernode.enabled);
    EXPECT_EQ(p.o.filter.nproc_per_node, 2) << words[2];
    EXPECT_EQ(p.o.map_by, "") << words[2];
  }
  auto p = parse({"-pernode", "-m", "pkg.train"});
  ASSERT_EQ(p.exit, -1) << p.error;
  EXPECT_FALSE(p.o.pernode.enabled);  // -m alone would be torchrun's per-node mode
  EXPECT_EQ(p.o.filter.nproc_per_node, 1);
  p = parse({"-N", "2", "--map-by", "ppr:3:node", "p"});
  EXPECT_EQ(p.exit, 2);
  EXPECT_NE(p.error.find("disagree"), std::string::npos) << p.error;
  p = parse({"-N", "2", "--nproc-per-node", "2", "p"});
  EXPECT_EQ(p.exit, 2);
  EXPECT_NE(p.error.find("-N and --nproc-per-node both"), std::string::npos) << p.error;
}

TEST(DropIn, MpirunsHostWithoutAHostfileIsTheHostList) {
  auto p = parse({"--host", "a,a,b:2", "p"});
  ASSERT_EQ(p.exit, -1) << p.error;
  EXPECT_EQ(p.o.hosts, "a:2,b:2");
  EXPECT_TRUE(p.o.app_host.empty());
  EXPECT_TRUE(p.o.apps.empty());
  EXPECT_EQ(host_list_as_inline({"[::1]:2", "[::1]", "x"}), "[::1]:3,x:1");
  // With a hostfile it is the nodes the program runs on (its slots, without -n).
  p = parse({"-hostfile", "h", "-host", "aa", "p"});
  ASSERT_EQ(p.exit, -1) << p.error;
  EXPECT_EQ(p.o.hostfile, "h");
  ASSERT_EQ(p.o.apps.size(), 1u);
  EXPECT_EQ(p.o.apps[0].hosts, (std::vector<std::string>{"aa"}));
  EXPECT_EQ(p.o.apps[0].np, 0);
  // MPMD: the apps' hosts together, each app keeping its own.
  p = parse({"--host", "a", "-np", "1", "x", ":", "-H", "b,c:2", "-np", "2", "y"});
  ASSERT_EQ(p.exit, -1) << p.error;
  EXPECT_EQ(p.o.hosts, "a:1,b:1,c:2");
  ASSERT_EQ(p.o.apps.size(), 2u);
  EXPECT_EQ(p.o.apps[1].hosts, (std::vector<std::string>{"b", "c"}));
  p = parse({"--host", "a:x", "p"});
  EXPECT_EQ(p.exit, 2);
  EXPECT_NE(p.error.find("--host: 'a:x'"), std::string::npos) << p.error;
}

TEST(DropIn, MpirunsMcaIsAVariableForEveryRankThatXCanOverride) {
  auto p = parse({"-np", "2", "--mca", "btl", "tcp,self", "-mca", "pml", "ob1", "-x",
                  "OMPI_MCA_pml=ucx", "--gmca", "a_b", "1", "./prog", "--mca", "x", "y"});
  ASSERT_EQ(p.exit, -1) << p.error;
  EXPECT_EQ(p.o.exports, (std::vector<std::string>{"OMPI_MCA_btl=tcp,self", "OMPI_MCA_pml=ob1",
                                                   "OMPI_MCA_a_b=1", "OMPI_MCA_pml=ucx"}));
  EXPECT_EQ(p.o.command, (std::vector<std::string>{"./prog", "--mca", "x", "y"}));
  p = parse({"-np", "2", "--mca", "bad-name", "1", "p"});
  EXPECT_EQ(p.exit, 2);
  EXPECT_NE(p.error.find("'bad-name' is not an MCA parameter name"), std::string::npos) << p.error;
}

TEST(DropIn, MpirunsOutputFilenameAndItsDirectives) {
  auto f = parse_output_filename("out");
  EXPECT_EQ(f.dir, "out");
  EXPECT_TRUE(f.jobid);
  EXPECT_TRUE(f.copy);
  f = parse_output_filename("/tmp/o:nocopy,nojobid");
  EXPECT_EQ(f.dir, "/tmp/o");
  EXPECT_FALSE(f.jobid);
  EXPECT_FALSE(f.copy);
  auto p = parse({"-np", "2", "-output-filename", "o:nocpy", "p"});
  EXPECT_EQ(p.exit, 2);
  EXPECT_NE(p.error.find("unknown directive 'nocpy'"), std::string::npos) << p.error;
  p = parse({"-np", "2", "--output-filename", "o", "--output-dir", "d", "p"});
  EXPECT_EQ(p.exit, 2);
  p = parse({"-np", "2", "--merge-stderr-to-stdout", "--allow-run-as-root", "p"});
  ASSERT_EQ(p.exit, -1) << p.error;
  EXPECT_TRUE(p.o.merge_stderr);
}

TEST(DropIn, DeepSpeedsSpellings) {
  auto p = parse({"--hostfile", "h", "--num_nodes", "2", "--num_gpus", "4", "--master_port",
                  "29501", "--no_local_rank", "train.py", "--deepspeed"});
  ASSERT_EQ(p.exit, -1) << p.error;
  EXPECT_FALSE(p.o.pernode.enabled);
  EXPECT_EQ(p.o.filter.num_nodes, 2);
  EXPECT_EQ(p.o.filter.nproc_per_node, 4);
  EXPECT_TRUE(p.o.filter.device_ids);
  EXPECT_EQ(p.o.master_port, 29501);
  EXPECT_EQ(p.o.command,
            (std::vector<std::string>{pernode_python(), "-u", "train.py", "--deepspeed"}));
  p = parse({"-H", "h", "-i", "a:0,1", "p"});
  ASSERT_EQ(p.exit, -1) << p.error;
  EXPECT_EQ(p.o.filter.include, "a:0,1");
  p = parse({"-H", "h", "-e", "a:0", "p"});
  ASSERT_EQ(p.exit, -1) << p.error;
  EXPECT_EQ(p.o.filter.exclude, "a:0");
  // The GPUs DeepSpeed gives each node: 0..N-1 where the hostfile says none.
  Hostfile hf = parse_inline_hosts("a:8,b:8");
  hf.hosts[1].gpus = {4, 5, 6, 7};
  const Hostfile kept = apply_node_filter(hf, {.nproc_per_node = 2, .device_ids = true});
  EXPECT_EQ(kept.hosts[0].gpus, (std::vector<int>{0, 1}));
  EXPECT_EQ(kept.hosts[1].gpus, (std::vector<int>{4, 5}));
  EXPECT_EQ(kept.hosts[0].slots, 2);
}

TEST(DropIn, DeepSpeedsEnvironmentFileIsReadFromHomeThenHere) {
  const EnvList env = parse_deepspeed_env_text(
      "NCCL_IB_DISABLE=1\n  PATH_EXTRA = /opt/x bin  \n\n# note\nQ=\"quoted\"\n", "ds");
  EXPECT_EQ(env,
            (EnvList{{"NCCL_IB_DISABLE", "1"}, {"PATH_EXTRA", "/opt/x bin"}, {"Q", "quoted"}}));
  try {
    (void)parse_deepspeed_env_text("A=1\nnot a variable\n", "/h/.deepspeed_env");
    ADD_FAILURE() << "a line without '=' must be refused";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("/h/.deepspeed_env:2:"), std::string::npos) << e.what();
  }
  const std::string home = ::testing::TempDir() + "dlaunch-ds-home";
  const std::string here = ::testing::TempDir() + "dlaunch-ds-here";
  for (const auto& d : {home, here}) {
    ::mkdir(d.c_str(), 0700);
    for (const char* f : {"/.deepspeed_env", "/other_env"}) {
      if (FILE* out = std::fopen((d + f).c_str(), "w")) std::fclose(out);
    }
  }
  EXPECT_EQ(deepspeed_env_files({}, home, here),
            (std::vector<std::string>{home + "/.deepspeed_env", here + "/.deepspeed_env"}));
  EXPECT_EQ(deepspeed_env_files({"DS_ENV_FILE=other_env"}, home, here),
            (std::vector<std::string>{home + "/other_env", here + "/other_env"}));
  EXPECT_EQ(deepspeed_env_files({"DS_ENV_FILE=" + here + "/other_env"}, home, here),
            (std::vector<std::string>{here + "/other_env"}));
  EXPECT_EQ(deepspeed_env_files({"DS_ENV_FILE=missing"}, home, here), std::vector<std::string>{});
}

TEST(DropIn, PeersOptionsThatCannotBeHonouredAreRefusedByNameWithAHint) {
  struct Case {
    std::vector<std::string> words;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"-np", "4", "--gloo", "p"}, "horovodrun's --gloo is not supported"},
      {{"-H", "h", "--launcher", "openmpi", "p"}, "deepspeed's --launcher is not supported"},
      {{"-H", "h", "--launcher_args=-x A", "p"}, "--launcher_args is not supported"},
      {{"-H", "h", "--no_ssh", "--node_rank", "0", "p"}, "--no_ssh is not supported"},
      {{"-H", "h", "-npersocket", "2", "p"}, "mpirun's --npersocket is not supported"},
      {{"-np", "2", "-prefix", "/opt/ompi", "p"}, "mpirun's --prefix is not supported"},
      {{"-np", "2", "--map-by", "ppr:2:socket", "p"}, "not per socket"},
      {{"-np", "2", "--map-by", "node", "p"}, "'node' (ranks dealt round-robin"},
      {{"-np", "2", "--map-by", "ppr:2:node:PE=2", "p"}, "modifiers of ppr are not supported"},
      {{"--nnodes", "2", "--node-rank", "0", "-N", "2", "p"}, "--npernode is for the head-node"},
      {{"--standalone", "--output-filename", "o", "p"}, "--output-filename is for the head-node"},
  };
  for (const auto& c : cases) {
    auto p = parse(c.words);
    EXPECT_EQ(p.exit, 2) << c.says;
    EXPECT_NE(p.error.find(c.says), std::string::npos) << p.error << " / wanted: " << c.says;
    EXPECT_NE(p.error.find("(hint: "), std::string::npos) << p.error;
  }
}

TEST(DropIn, RanksGetMpirunsVariablesWhenThePlanSaysSo) {
  PlanOptions po;
  po.job_id = "j";
  po.command = {"prog"};
  po.mpirun_env = true;
  const JobPlan plan = make_plan(parse_inline_hosts("a:2,b:3"), po);
  const auto& n = plan.nodes.at(1);
  const auto env = rank_environment(plan, n, n.ranks.at(1));
  EXPECT_EQ(env_of(env, "OMPI_COMM_WORLD_RANK"), "3");
  EXPECT_EQ(env_of(env, "OMPI_COMM_WORLD_SIZE"), "5");
  EXPECT_EQ(env_of(env, "OMPI_COMM_WORLD_LOCAL_RANK"), "1");
  EXPECT_EQ(env_of(env, "OMPI_COMM_WORLD_LOCAL_SIZE"), "3");
  EXPECT_EQ(env_of(env, "OMPI_COMM_WORLD_NODE_RANK"), "1");
  EXPECT_EQ(env_of(env, "OMPI_UNIVERSE_SIZE"), "5");
  po.mpirun_env = false;
  const JobPlan plain = make_plan(parse_inline_hosts("a:2"), po);
  EXPECT_EQ(env_of(rank_environment(plain, plain.nodes[0], plain.nodes[0].ranks[0]),
                   "OMPI_COMM_WORLD_RANK"),
            "<unset>");
}

TEST(PerNodeOptions, WhatMakesNoSenseIsRefusedByName) {
  struct Case {
    std::vector<std::string> words;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--nnodes", "2", "--rdzv-endpoint", "h", "--start-method", "spawn", "p"},
       "--start-method is not supported"},
      {{"--nnodes", "2", "--rdzv-endpoint", "h", "-H", "a:2", "p"}, "--hosts is for the head-node"},
      {{"--nnodes", "2", "--rdzv-endpoint", "h", "--check", "p"}, "--check is for the head-node"},
      {{"--nnodes", "2", "--rdzv-backend", "etcd", "--rdzv-endpoint", "h", "p"},
       "'etcd' is not supported"},
      {{"--nnodes", "2", "p"}, "a static rendezvous of 2 nodes needs this node's --node-rank"},
      {{"--nnodes", "2", "--rdzv-backend", "c10d", "p"}, "c10d rendezvous needs --rdzv-endpoint"},
      {{"--nnodes", "2", "--node-rank", "2", "p"}, "2 is not below --nnodes 2"},
      {{"--nnodes", "3:2", "--rdzv-endpoint", "h", "p"}, "MIN is larger than MAX"},
      {{"--nnodes", "2", "--rdzv-endpoint", "h", "--master-addr", "x", "p"},
       "--master-addr is for a static rendezvous"},
      {{"--nnodes", "2", "--rdzv-endpoint", "h", "--redirects", "5", "p"},
       "'5': expected 0-3 (none, stdout, stderr, both)"},
      {{"--nnodes", "2", "--rdzv-endpoint", "h", "--tee", "0:1,x:2", "p"},
       "'x:2' is not LOCAL_RANK:0-3"},
      {{"-H", "a:2", "--log-dir", "d", "p"}, "--log-dir is for the per-node mode"},
      {{"--standalone", "--node-rank", "0", "p"}, "--standalone runs this node alone"},
  };
  for (const auto& c : cases) {
    auto p = parse(c.words);
    EXPECT_EQ(p.exit, 2) << c.says;
    EXPECT_NE(p.error.find(c.says), std::string::npos) << p.error << " / wanted: " << c.says;
  }
}

using dltest::ScopedEnv;

TEST(PerNodeEnvironment, TorchrunsPetVariablesFillWhatTheCommandLineLeavesOut) {
  // What Kubeflow's training operator sets in a PyTorchJob pod (1.7 and
  // later): PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, and the master in
  // MASTER_ADDR and MASTER_PORT; WORLD_SIZE counts processes there, so it is
  // not read.
  ScopedEnv env{{"PET_NNODES", "4"},      {"PET_NPROC_PER_NODE", "8"},
                {"PET_NODE_RANK", "2"},   {"MASTER_ADDR", "train-master-0"},
                {"MASTER_PORT", "23456"}, {"KUBERNETES_SERVICE_HOST", "10.96.0.1"},
                {"WORLD_SIZE", "32"},     {"RANK", "2"}};
  auto p = parse({"train.py"});  // no option at all: the environment selects the mode
  ASSERT_EQ(p.exit, -1) << p.error;
  EXPECT_TRUE(p.o.pernode.enabled);
  EXPECT_EQ(p.o.pernode.max_nodes, 4);
  EXPECT_EQ(p.o.pernode.nproc, "8");
  EXPECT_EQ(p.o.pernode.node_rank, 2);
  EXPECT_EQ(p.o.pernode.rdzv_backend, "static");
  EXPECT_EQ(p.o.master_addr, "train-master-0");
  EXPECT_EQ(p.o.master_port, 23456);
  // The command line wins.
  p = parse({"--nproc-per-node", "2", "--node-rank", "3", "train.py"});
  ASSERT_EQ(p.exit, -1) << p.error;
  EXPECT_EQ(p.o.pernode.nproc, "2");
  EXPECT_EQ(p.o.pernode.node_rank, 3);
  // -H keeps the head-node mode, and the environment out of it.
  p = parse({"-H", "a:2", "prog"});
  ASSERT_EQ(p.exit, -1) << p.error;
  EXPECT_FALSE(p.o.pernode.enabled);
  EXPECT_EQ(p.o.filter.nproc_per_node, 0);
  {
    // torchrun's own names come first.
    ScopedEnv pet{{"PET_MASTER_ADDR", "10.0.0.9"}, {"PET_MASTER_PORT", "29501"}};
    p = parse({"train.py"});
    EXPECT_EQ(p.o.master_addr, "10.0.0.9");
    EXPECT_EQ(p.o.master_port, 29501);
  }
  {
    // Outside a pod MASTER_ADDR is no one's to read.
    ScopedEnv outside{{"KUBERNETES_SERVICE_HOST", ""}};
    p = parse({"train.py"});
    EXPECT_TRUE(p.o.master_addr.empty());
  }
}

TEST(PerNodeEnvironment, ElasticPolicyMeetsAtTheRendezvousEndpoint) {
  // An elasticPolicy: c10d, whose ranks the rendezvous assigns (the node
  // rank and master address the operator also sets are not used).
  ScopedEnv env{{"PET_NNODES", "1:3"},
                {"PET_RDZV_BACKEND", "c10d"},
                {"PET_RDZV_ENDPOINT", "train-worker-0:23456"},
                {"PET_RDZV_ID", "train"},
                {"PET_MAX_RESTARTS", "3"},
                {"PET_NODE_RANK", "1"},
                {"PET_MASTER_ADDR", "train-worker-0"}};
  const auto p = parse({"--nproc-per-node", "gpu", "train.py"});
  ASSERT_EQ(p.exit, -1) << p.error;
  EXPECT_EQ(p.o.pernode.rdzv_backend, "c10d");
  EXPECT_EQ(p.o.pernode.rdzv_endpoint, "train-worker-0:23456");
  EXPECT_EQ(p.o.pernode.rdzv_id, "train");
  EXPECT_EQ(p.o.pernode.min_nodes, 1);
  EXPECT_EQ(p.o.pernode.max_nodes, 3);
  EXPECT_EQ(p.o.pernode.node_rank, -1);
  EXPECT_EQ(p.o.max_restarts, 3);
  EXPECT_TRUE(p.o.master_addr.empty());
}

TEST(PerNodeEnvironment, OlderPyTorchJobPodsGiveWorldSizeAsNodesAndRankAsNodeRank) {
  // Operators before 1.7 (and Volcano's pytorch plugin): WORLD_SIZE is the
  // number of pods, RANK the pod's index.
  ScopedEnv env{{"KUBERNETES_SERVICE_HOST", "10.96.0.1"},
                {"MASTER_ADDR", "train-master-0"},
                {"MASTER_PORT", "23456"},
                {"WORLD_SIZE", "3"},
                {"RANK", "1"}};
  auto p = parse({"--nproc-per-node", "8", "train.py"});
  ASSERT_EQ(p.exit, -1) << p.error;
  EXPECT_EQ(p.o.pernode.max_nodes, 3);
  EXPECT_EQ(p.o.pernode.node_rank, 1);
  EXPECT_EQ(p.o.master_addr, "train-master-0");
  EXPECT_EQ(p.o.master_port, 23456);
  {
    // Inside a rank of a launcher (LOCAL_RANK set) these are that job's.
    ScopedEnv rank{{"LOCAL_RANK", "0"}};
    p = parse({"--nproc-per-node", "8", "train.py"});
    ASSERT_EQ(p.exit, -1) << p.error;
    EXPECT_EQ(p.o.pernode.max_nodes, 1);
    EXPECT_EQ(p.o.pernode.node_rank, 0);
  }
  {
    // Outside a pod, no guessing either.
    ScopedEnv outside{{"KUBERNETES_SERVICE_HOST", ""}};
    p = parse({"--nproc-per-node", "8", "train.py"});
    EXPECT_EQ(p.o.pernode.max_nodes, 1);
  }
}

TEST(PerNodeEnvironment, JobSetPodIndexIsTheNodeRankOfAStaticRendezvous) {
  ScopedEnv env{{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}, {"JOB_COMPLETION_INDEX", "2"}};
  auto p = parse({"--nnodes", "4", "--nproc-per-node", "8", "--master-addr",
                  "train-workers-0-0.train", "train.py"});
  ASSERT_EQ(p.exit, -1) << p.error;
  EXPECT_EQ(p.o.pernode.node_rank, 2);
  // A c10d rendezvous assigns them; no index is taken.
  p = parse({"--nnodes", "4", "--rdzv-endpoint", "train-workers-0-0.train:29400", "train.py"});
  ASSERT_EQ(p.exit, -1) << p.error;
  EXPECT_EQ(p.o.pernode.node_rank, -1);
}

TEST(PerNodeEnvironment, ABadValueNamesTheVariableItCameFrom) {
  ScopedEnv env{{"PET_NNODES", "2"}, {"PET_NODE_RANK", "5"}};
  auto p = parse({"train.py"});
  EXPECT_EQ(p.exit, 2);
  EXPECT_NE(p.error.find("5 is not below --nnodes 2 (--node-rank from PET_NODE_RANK=5)"),
            std::string::npos)
      << p.error;
  ScopedEnv port{{"PET_NODE_RANK", "1"}, {"PET_MASTER_PORT", "http"}};
  p = parse({"train.py"});
  EXPECT_EQ(p.exit, 2);
  EXPECT_NE(p.error.find("'http' is not a number from 1 to 65535 (--master-port from "
                         "PET_MASTER_PORT=http)"),
            std::string::npos)
      << p.error;
}

TEST(PerNodeOptions, RdzvConf) {
  const auto c = parse_rdzv_conf("join_timeout=5,last_call_timeout=0.5,read_timeout=7,secret=abc");
  EXPECT_EQ(c.join_timeout_s, 5);
  EXPECT_EQ(c.last_call_timeout_s, 0.5);
  EXPECT_EQ(c.read_timeout_s, 7);
  EXPECT_EQ(c.secret, "abc");
  EXPECT_FALSE(c.insecure);
  EXPECT_TRUE(parse_rdzv_conf("insecure=1").insecure);
  EXPECT_THROW(parse_rdzv_conf("join_timeout=x"), InputError);
  EXPECT_THROW(parse_rdzv_conf("joint_timeout=5"), InputError);
  EXPECT_THROW(parse_rdzv_conf("secret="), InputError);
}

TEST(PerNodeOptions, NprocPerNode) {
  EXPECT_EQ(resolve_nproc("3", {}), 3);
  EXPECT_EQ(resolve_nproc("gpu", {"CUDA_VISIBLE_DEVICES=0,1,3"}), 3);
  EXPECT_EQ(resolve_nproc("auto", {"CUDA_VISIBLE_DEVICES=5"}), 1);
  EXPECT_GE(resolve_nproc("cpu", {}), 1);
}

TEST(PerNodePlan, GlobalRanksAndTorchrunEnvironmentOfNodeTwoOfThree) {
  PlanOptions po;
  po.job_id = "j";
  po.command = {"prog"};
  po.head_env = {"TORCH_NCCL_ASYNC_ERROR_HANDLING=3"};
  Membership m;
  m.nnodes = 3;
  m.node_rank = 2;
  m.nproc = 2;
  m.master_addr = "10.0.0.1";
  m.master_port = 1234;
  m.store_host = "10.0.0.1";
  m.store_port = 29400;
  const JobPlan plan = make_node_plan(po, m, "host2", "trainer", "sec");
  EXPECT_EQ(plan.world_size, 6);
  EXPECT_EQ(plan.master_addr, "10.0.0.1");
  ASSERT_EQ(plan.nodes.size(), 1u);
  const auto& n = plan.nodes.front();
  EXPECT_EQ(n.node_rank, 2);
  EXPECT_EQ(n.host.name, "host2");
  EXPECT_EQ(n.host.transport, Transport::kLocal);
  EXPECT_EQ(env_of(n.env, "TORCHELASTIC_USE_AGENT_STORE"), "False");
  // The launcher's own value is not overridden: its ranks inherit the 3.
  EXPECT_EQ(env_of(n.env, "TORCH_NCCL_ASYNC_ERROR_HANDLING"), "<unset>");
  EXPECT_EQ(env_of(n.env, "DLAUNCH_STORE_ADDR"), "10.0.0.1");
  EXPECT_EQ(env_of(n.env, "DLAUNCH_STORE_PORT"), "29400");
  EXPECT_EQ(env_of(n.env, "DLAUNCH_STORE_SECRET"), "sec");
  ASSERT_EQ(n.ranks.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const auto& rank = n.ranks[static_cast<std::size_t>(i)];
    EXPECT_EQ(rank.rank, 4 + i);
    const auto env = dlaunch::rank_environment(plan, n, rank);
    EXPECT_EQ(rank.local_rank, i);
    EXPECT_EQ(env_of(env, "RANK"), std::to_string(4 + i));
    EXPECT_EQ(env_of(env, "LOCAL_RANK"), std::to_string(i));
    EXPECT_EQ(env_of(env, "WORLD_SIZE"), "6");
    EXPECT_EQ(env_of(env, "LOCAL_WORLD_SIZE"), "2");
    EXPECT_EQ(env_of(env, "GROUP_RANK"), "2");
    EXPECT_EQ(env_of(env, "GROUP_WORLD_SIZE"), "3");
    EXPECT_EQ(env_of(env, "NODE_RANK"), "2");
    EXPECT_EQ(env_of(env, "NNODES"), "3");
    EXPECT_EQ(env_of(env, "ROLE_NAME"), "trainer");
    EXPECT_EQ(env_of(env, "ROLE_RANK"), std::to_string(4 + i));
    EXPECT_EQ(env_of(env, "ROLE_WORLD_SIZE"), "6");
    EXPECT_EQ(env_of(env, "TORCHELASTIC_RUN_ID"), "j");
  }
  // Without the variable in the launcher's environment: torchrun's 1.
  po.head_env = {};
  const JobPlan plan2 = make_node_plan(po, m, "host2", "default", "sec");
  EXPECT_EQ(env_of(plan2.nodes.front().env, "TORCH_NCCL_ASYNC_ERROR_HANDLING"), "1");
}

TEST(PerNodeMpi, NodeNamesAreTheHostsMadeUniqueWhereLaunchersShareOne) {
  EXPECT_EQ(mpi_node_names({"gpu-1 pid 10", "gpu-2 pid 11"}),
            (std::vector<std::string>{"gpu-1", "gpu-2"}));
  // Two launchers on one machine are two nodes to PMIx.
  EXPECT_EQ(mpi_node_names({"vm pid 10", "vm pid 11", "other pid 3"}),
            (std::vector<std::string>{"vm-node0", "vm-node1", "other-node2"}));
  // PMIx's node map is comma-separated: no comma, space or bracket gets in.
  EXPECT_EQ(mpi_node_names({"a,b [x] pid 1"}), (std::vector<std::string>{"a-b--x-"}));
}

// --check and --preflight take an optional depth (issue 33): bare is full.
TEST(CheckOptions, CheckAndPreflightTakeQuickOrFull) {
  auto p = parse({"--check", "true"});
  ASSERT_EQ(p.exit, -1) << p.error;
  EXPECT_TRUE(p.o.check);
  EXPECT_FALSE(p.o.check_quick);
  p = parse({"--check=quick", "true"});
  ASSERT_EQ(p.exit, -1) << p.error;
  EXPECT_TRUE(p.o.check);
  EXPECT_TRUE(p.o.check_quick);
  p = parse({"--check=full", "true"});
  EXPECT_TRUE(p.o.check && !p.o.check_quick);
  p = parse({"--preflight=quick", "true"});
  ASSERT_EQ(p.exit, -1) << p.error;
  EXPECT_TRUE(p.o.preflight && !p.o.check && p.o.check_quick);
  p = parse({"--preflight", "true"});
  EXPECT_TRUE(p.o.preflight && !p.o.check_quick);
  // The depth is no program: `--check quick` checks a program named quick.
  p = parse({"--check", "quick"});
  EXPECT_TRUE(p.o.check && !p.o.check_quick);
  ASSERT_FALSE(p.o.command.empty());
  EXPECT_EQ(p.o.command.front(), "quick");
  EXPECT_EQ(parse({"--check=slow", "true"}).exit, 2);
  EXPECT_FALSE(parse({"true"}).o.check);
}
