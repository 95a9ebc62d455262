// MPMD: the command line's apps, app files, the plan's placement and roles,
// and what each node's Setup carries for them (docs/mpmd.md).
#include <functional>
#include <tuple>

#include <gtest/gtest.h>

#include "cli/apps.h"
#include "cli/options.h"
#include "controller/controller.h"
#include "controller/setup.h"
#include "env_list_support.h"
#include "plan/plan.h"

using namespace dlaunch;

namespace {

HostEntry local_host(const std::string& name, int slots) {
  HostEntry h;
  h.name = h.host = name;
  h.slots = slots;
  h.transport = Transport::kLocal;
  return h;
}

AppPlan app(int np, const std::string& role, std::vector<std::string> hosts = {},
            int nproc_per_node = 0) {
  AppPlan a;
  a.np = np;
  a.role = role;
  a.hosts = std::move(hosts);
  a.nproc_per_node = nproc_per_node;
  a.command = {role};
  a.pos = {"app"};
  return a;
}

// Options from a command line (without the program name).
Options parse(std::vector<std::string> args) {
  args.insert(args.begin(), "dlaunch");
  std::vector<char*> argv;
  argv.reserve(args.size());
  for (auto& a : args) argv.push_back(a.data());
  Options o;
  int code = -1;
  EXPECT_TRUE(parse_options(static_cast<int>(argv.size()), argv.data(), o, code));
  return o;
}

std::string input_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

using dltest::get;
using dltest::rank_var;

}  // namespace

TEST(MpmdCli, ColonSplitsAppsWhenAnOptionFollows) {
  const auto parts = split_apps({"a", "1", ":", "-n", "2", "b", ":", "c"});
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0], (std::vector<std::string>{"a", "1"}));
  EXPECT_EQ(parts[1], (std::vector<std::string>{"-n", "2", "b", ":", "c"}));
  EXPECT_EQ(split_apps({"sh", "-c", ":"}).size(), 1u);
}

TEST(MpmdCli, CommandLineAppsWithTheirOptions) {
  const Options o = parse({"-x",     "G=1",    "-n",         "1",     "--role",
                           "server", "--host", "a,b",        "srv",   "--port",
                           "5",      ":",      "-n",         "8",     "--nproc-per-node=4",
                           "-x",     "A=2",    "--env-file", "e.env", "--wdir",
                           "run",    "--host", "c",          "--",    "-weird",
                           "x"});
  ASSERT_EQ(o.apps.size(), 2u);
  EXPECT_EQ(o.np, 9);
  EXPECT_EQ(o.command, (std::vector<std::string>{"srv", "--port", "5"}));
  EXPECT_EQ(o.exports, (std::vector<std::string>{"G=1"}));  // global
  EXPECT_EQ(o.apps[0].np, 1);
  EXPECT_EQ(o.apps[0].role, "server");
  EXPECT_EQ(o.apps[0].hosts, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(o.apps[1].np, 8);
  EXPECT_EQ(o.apps[1].nproc_per_node, 4);
  EXPECT_EQ(o.apps[1].exports, (std::vector<std::string>{"A=2"}));
  EXPECT_EQ(o.apps[1].env_files, (std::vector<std::string>{"e.env"}));
  EXPECT_EQ(o.apps[1].workdir, "run");
  EXPECT_EQ(o.apps[1].hosts, (std::vector<std::string>{"c"}));
  EXPECT_EQ(o.apps[1].command, (std::vector<std::string>{"-weird", "x"}));
  EXPECT_EQ(app_role(o.apps[1]), "-weird");
  EXPECT_EQ(app_role(AppSpec{.command = {"/usr/bin/python3", "x.py"}}), "python3");

  const Options one = parse({"-n", "2", "prog"});
  EXPECT_TRUE(one.apps.empty());
  EXPECT_EQ(one.stdin_target.kind, StdinTarget::Kind::kRank);
  EXPECT_EQ(one.stdin_target.rank, 0);
}

TEST(MpmdCli, BadAppsAreInputErrorsNamingTheAppAndField) {
  EXPECT_NE(input_error([] {
              parse_app_words({"-n", "0", "x"}, {"app 2"});
            }).find("app 2: -n: expected a positive integer, got '0'"),
            std::string::npos);
  EXPECT_NE(input_error([] {
              parse_app_words({"-n", "2"}, {"app 3"});
            }).find("app 3: program: no program for this app"),
            std::string::npos);
  EXPECT_NE(input_error([] {
              parse_app_words({"-n", "2", "--wdir"}, {"app 2"});
            }).find("app 2: --wdir: --wdir needs a value"),
            std::string::npos);
  EXPECT_NE(input_error([] {
              parse_app_words({"-n", "1", "--host", "a,,b", "x"}, {"app 2"});
            }).find("--host: empty host name"),
            std::string::npos);
  EXPECT_NE(input_error([] {
              parse_app_words({"-n", "1", "--role", "a b", "x"}, {"app 2"});
            }).find("is not a role name"),
            std::string::npos);
}

TEST(MpmdCli, ShellWordsAsPosixSplitsThem) {
  const SourcePos pos{"f", 1, 0};
  EXPECT_EQ(
      split_shell_words(R"(-n 2 sh -c 'echo $A "b"' "x \"y\" \$z" a\ b '')", pos),
      (std::vector<std::string>{"-n", "2", "sh", "-c", "echo $A \"b\"", "x \"y\" $z", "a b", ""}));
  EXPECT_NE(input_error([&] { split_shell_words("a \"b", pos); }).find("f:1: quote"),
            std::string::npos);
  EXPECT_NE(input_error([&] { split_shell_words("a \\", pos); }).find("backslash at the end"),
            std::string::npos);
}

TEST(MpmdCli, AppFileSkipsCommentsAndBlankLinesAndNamesLines) {
  const auto apps = parse_app_file_text(
      "# roles\n\n  -n 1 --role ps ./ps --x 1\n\t# more\n-n 4 ./worker 'a b'\n", "jobs.app");
  ASSERT_EQ(apps.size(), 2u);
  EXPECT_EQ(apps[0].role, "ps");
  EXPECT_EQ(apps[0].pos.line, 3);
  EXPECT_EQ(apps[1].command, (std::vector<std::string>{"./worker", "a b"}));
  EXPECT_EQ(apps[1].pos.line, 5);
  EXPECT_NE(input_error([] {
              parse_app_file_text("-n 1 a\n-n x b\n", "jobs.app");
            }).find("jobs.app:2: -n: expected a positive integer, got 'x'"),
            std::string::npos);
  EXPECT_NE(input_error([] {
              parse_app_file_text("# nothing\n\n", "jobs.app");
            }).find("jobs.app: apps: no app in the file"),
            std::string::npos);
  EXPECT_NE(input_error([] {
              parse_app_file_text("-n 1 a : -n 2 b\n", "jobs.app");
            }).find("jobs.app:1: :: more than one app on one line"),
            std::string::npos);
}

TEST(MpmdPlan, AppsTakeRanksInOrderAndFillFreeSlotsNodeByNode) {
  Hostfile hf;
  hf.source = "hosts";
  hf.hosts = {local_host("a", 2), local_host("b", 2), local_host("c", 2)};
  PlanOptions po{.job_id = "j"};
  po.apps = {app(1, "ps"), app(3, "worker"), app(1, "eval", {"c"})};
  const auto plan = make_plan(hf, po);
  EXPECT_EQ(plan.world_size, 5);
  ASSERT_EQ(plan.nodes.size(), 3u);
  // a: ps 0, worker 1; b: worker 2, 3; c: eval 4.
  std::vector<std::tuple<int, int, int, int>> got;  // node, rank, local rank, app
  for (const auto& n : plan.nodes) {
    for (const auto& r : n.ranks) got.emplace_back(n.node_rank, r.rank, r.local_rank, r.app);
  }
  EXPECT_EQ(got, (std::vector<std::tuple<int, int, int, int>>{
                     {0, 0, 0, 0}, {0, 1, 1, 1}, {1, 2, 0, 1}, {1, 3, 1, 1}, {2, 4, 0, 2}}));
  const auto w = dlaunch::rank_environment(plan, plan.nodes[1], plan.nodes[1].ranks[1]);
  EXPECT_EQ(get(w, "ROLE_NAME"), "worker");
  EXPECT_EQ(get(w, "ROLE_RANK"), "2");
  EXPECT_EQ(get(w, "ROLE_WORLD_SIZE"), "3");
  EXPECT_EQ(get(w, "RANK"), "3");
  EXPECT_EQ(get(w, "WORLD_SIZE"), "5");
  EXPECT_EQ(rank_var(plan, 0, 0, "ROLE_NAME"), "ps");
  EXPECT_EQ(rank_var(plan, 0, 0, "ROLE_WORLD_SIZE"), "1");
  EXPECT_EQ(plan.apps[2].first_rank, 4);
}

TEST(MpmdPlan, OneRoleAcrossAppsAndHostRestrictionsLeaveRanksApart) {
  Hostfile hf;
  hf.source = "hosts";
  hf.hosts = {local_host("a", 2), local_host("b", 2)};
  PlanOptions po{.job_id = "j"};
  po.apps = {app(1, "w"), app(1, "ps", {"b"}), app(2, "w", {}, 1)};
  const auto plan = make_plan(hf, po);
  // a: w 0, w 2; b: ps 1, w 3.
  ASSERT_EQ(plan.nodes.size(), 2u);
  EXPECT_EQ(plan.nodes[0].ranks[1].rank, 2);
  EXPECT_EQ(plan.nodes[1].ranks[1].rank, 3);
  EXPECT_EQ(rank_var(plan, 0, 1, "ROLE_RANK"), "1");
  EXPECT_EQ(rank_var(plan, 1, 1, "ROLE_RANK"), "2");
  EXPECT_EQ(rank_var(plan, 1, 1, "ROLE_WORLD_SIZE"), "3");
  EXPECT_EQ(rank_var(plan, 1, 0, "ROLE_WORLD_SIZE"), "1");

  // Under --mpi the Setup says which node each rank is on.
  ControllerConfig cfg{.workdir = "/job", .mpi = true, .stdin_rank = 2};
  const auto s0 = make_node_setup(plan, cfg, 0);
  EXPECT_EQ(s0.ranks_per_node, (std::vector<std::int32_t>{2, 2}));
  EXPECT_EQ(s0.node_of_rank, (std::vector<std::int32_t>{0, 1, 0, 1}));
  ASSERT_EQ(s0.workers.size(), 2u);
  EXPECT_FALSE(s0.workers[0].stdin_pipe);
  EXPECT_TRUE(s0.workers[1].stdin_pipe);  // rank 2
}

TEST(MpmdPlan, TooFewSlotsForAnAppOrAnUnknownHostAreInputErrors) {
  Hostfile hf;
  hf.source = "hosts";
  hf.hosts = {local_host("a", 2), local_host("b", 1)};
  PlanOptions po{.job_id = "j"};
  po.apps = {app(2, "x"), app(2, "y", {"a", "b"})};
  EXPECT_NE(input_error([&] { make_plan(hf, po); })
                .find("app: -n: 2 ranks requested but the slots left for this app on hosts come "
                      "to only 1"),
            std::string::npos);
  po.apps = {app(1, "x", {"z"})};
  EXPECT_NE(input_error([&] { make_plan(hf, po); }).find("no node named 'z' in hosts"),
            std::string::npos);
}

TEST(MpmdPlan, SetupGivesEachRankItsAppsProgramEnvironmentAndDirectory) {
  Hostfile hf;
  hf.hosts = {local_host("a", 3)};
  PlanOptions po{.job_id = "j", .user_env = {{"G", "1"}, {"A", "global"}}};
  AppPlan server = app(1, "server");
  server.command = {"srv", "--port", "1"};
  server.workdir = "/srv";
  AppPlan worker = app(2, "worker");
  worker.env = {{"A", "mine"}};
  worker.workdir = "sub";
  po.apps = {server, worker};
  const auto plan = make_plan(hf, po);
  ControllerConfig cfg{.workdir = "/job", .stdin_rank = kStdinAll};
  const auto s = make_node_setup(plan, cfg, 0);
  ASSERT_EQ(s.workers.size(), 3u);
  EXPECT_EQ(s.workers[0].argv, (std::vector<std::string>{"srv", "--port", "1"}));
  EXPECT_EQ(s.workers[0].workdir, "/srv");
  EXPECT_EQ(s.workers[1].argv, (std::vector<std::string>{"worker"}));
  EXPECT_EQ(s.workers[1].workdir, "/job/sub");
  EXPECT_TRUE(s.node_of_rank.empty());
  for (const auto& w : s.workers) EXPECT_TRUE(w.stdin_pipe);
  // The app's -x comes after the job's: the last of a name wins.
  EXPECT_EQ(get(s.workers[1].env, "A"), "mine");
  EXPECT_EQ(get(s.workers[0].env, "A"), "global");
}

TEST(MpmdCli, AnAppsContainerImageIsItsOwnOption) {
  const AppSpec a =
      parse_app_words({"-n", "2", "--container-image", "localhost/ps:1", "ps"}, {"app 2"});
  EXPECT_EQ(a.container_image, "localhost/ps:1");
  EXPECT_EQ(a.command, (std::vector<std::string>{"ps"}));
  EXPECT_EQ(parse_app_words({"-n", "1", "--container-image=img:2", "x"}, {"app 2"}).container_image,
            "img:2");
  for (const char* bad : {"", "two words", "-x"}) {
    EXPECT_NE(input_error([&] {
                parse_app_words({"-n", "1", "--container-image", bad, "x"}, {"app 2"});
              }).find("app 2: --container-image: '" + std::string(bad) + "' is not an image name"),
              std::string::npos)
        << bad;
  }
  // On the command line the first app's options are the job's: there it is
  // the job's --container-image; a later app has its own.
  const Options o = parse({"-n", "1", "--container-image", "job:1", "a", ":", "-n", "1",
                           "--container-image", "ps:1", "b"});
  EXPECT_EQ(o.container.image, "job:1");
  ASSERT_EQ(o.apps.size(), 2u);
  EXPECT_EQ(o.apps[1].container_image, "ps:1");
  const auto apps = parse_app_file_text("-n 1 --container-image ps:1 ./ps\n-n 2 ./w\n", "j.app");
  EXPECT_EQ(apps[0].container_image, "ps:1");
  EXPECT_EQ(apps[1].container_image, "");
}

TEST(MpmdPlan, AnAppsImageIsItsNodesAndAppsSharingANodeMustAgree) {
  Hostfile hf;
  hf.source = "hosts";
  hf.hosts = {local_host("a", 2), local_host("b", 2), local_host("c", 2)};
  hf.hosts[2].container = "site:1";  // the hostfile's `container:`
  PlanOptions po{.job_id = "j", .container_image = "job:1"};
  AppPlan ps = app(2, "ps", {"a"});
  ps.container_image = "ps:1";
  AppPlan w = app(2, "w", {"b"});
  AppPlan e = app(2, "e", {"c"});
  e.container_image = "eval:1";
  po.apps = {ps, w, e};
  auto plan = make_plan(hf, po);
  ASSERT_EQ(plan.nodes.size(), 3u);
  EXPECT_EQ(plan.nodes[0].host.container, "ps:1");
  EXPECT_EQ(plan.nodes[0].container_app, 0);
  // An app without an image: the node's (here the job's, set by the Setup).
  EXPECT_EQ(plan.nodes[1].host.container, "");
  EXPECT_EQ(plan.nodes[1].container_app, -1);
  // The app's image over the hostfile's: the program names what it needs.
  EXPECT_EQ(plan.nodes[2].host.container, "eval:1");
  ControllerConfig cfg{.workdir = "/job"};
  cfg.container.image = "job:1";
  EXPECT_EQ(make_node_setup(plan, cfg, 0).container.image, "ps:1");
  EXPECT_EQ(make_node_setup(plan, cfg, 1).container.image, "job:1");
  EXPECT_EQ(make_node_setup(plan, cfg, 2).container.image, "eval:1");

  // Two apps on one node in the same image: one container holds both.
  AppPlan w2 = app(1, "w2", {"a"});
  w2.container_image = "ps:1";
  ps.np = 1;
  po.apps = {ps, w2};
  plan = make_plan(hf, po);
  EXPECT_EQ(plan.nodes[0].host.container, "ps:1");
  // ... or the node's own image, named or not.
  AppPlan on_c = app(1, "x", {"c"});
  AppPlan on_c_named = app(1, "y", {"c"});
  on_c_named.container_image = "site:1";
  po.apps = {on_c, on_c_named};
  EXPECT_EQ(make_plan(hf, po).nodes[0].host.container, "site:1");

  // Different images on one node: an input error naming the app and node.
  w2.container_image = "other:1";
  w2.pos = {"j.app", 2};
  po.apps = {ps, w2};
  EXPECT_NE(input_error([&] { make_plan(hf, po); })
                .find("j.app:2: --container-image: its ranks run in other:1 but share node 0 (a) "
                      "with app's, which run in ps:1; one container per node holds the node's "
                      "ranks"),
            std::string::npos)
      << input_error([&] { make_plan(hf, po); });
  // An app in the job's image next to one in another image.
  AppPlan plain = app(1, "plain", {"a"});
  po.apps = {plain, ps};
  EXPECT_NE(input_error([&] {
              make_plan(hf, po);
            }).find("its ranks run in job:1 but share node 0 (a) with app's, which run in ps:1"),
            std::string::npos)
      << input_error([&] { make_plan(hf, po); });
  // Without a job's image, on the host.
  po.container_image.clear();
  EXPECT_NE(input_error([&] { make_plan(hf, po); }).find("its ranks run on the host (no image)"),
            std::string::npos);
}
