// Allocations of PBS/Torque, LSF, SGE/UGE and Flux: their node files and
// resource sets in the formats the schedulers document, and which one wins
// when several schedulers' variables are set.
#include "hostfile/allocation.h"

#include <gtest/gtest.h>

#include "test_support.h"

namespace dlaunch {
namespace {

using testing::catch_input_error;
using testing::TempDir;

struct Slots {
  std::string host;
  int slots;
  bool operator==(const Slots&) const = default;
};

std::vector<Slots> slots_of(const Hostfile& hf) {
  std::vector<Slots> out;
  for (const auto& h : hf.hosts) out.push_back({h.host, h.slots});
  return out;
}

void PrintTo(const Slots& s, std::ostream* os) { *os << s.host << ":" << s.slots; }

std::string where(const InputError& e) {
  return e.pos().source + ":" + std::to_string(e.pos().line) + ":" + std::to_string(e.pos().column);
}

TEST(PbsNodefile, AHostOncePerSlotInFirstSeenOrder) {
  // Torque's -l nodes=2:ppn=2 writes each host ppn times; PBS Pro's
  // place=scatter can interleave them: slots are counted wherever they are.
  const auto hf =
      parse_host_per_slot("node01\nnode01\nnode02\nnode02\n", "/pbs/aux/7.srv", "PBS_NODEFILE");
  EXPECT_EQ(slots_of(hf), (std::vector<Slots>{{"node01", 2}, {"node02", 2}}));
  EXPECT_EQ(hf.source, "/pbs/aux/7.srv");
  EXPECT_EQ(hf.hosts[1].pos.line, 3);
  EXPECT_EQ(slots_of(parse_host_per_slot("b.cluster\na.cluster\n\n  b.cluster\r\n", "f", "V")),
            (std::vector<Slots>{{"b.cluster", 2}, {"a.cluster", 1}}));
}

TEST(PbsNodefile, MalformedLinesNameTheFileLineAndField) {
  auto e = catch_input_error(
      [] { parse_host_per_slot("node01\nnode02 slots=4\n", "/pbs/aux/7.srv", "PBS_NODEFILE"); });
  EXPECT_EQ(where(e), "/pbs/aux/7.srv:2:8");
  EXPECT_EQ(e.field(), "host");
  EXPECT_NE(e.hint().find("PBS_NODEFILE lists one host name per line"), std::string::npos);

  e = catch_input_error([] { parse_host_per_slot("ok\nno$de\n", "nf", "PBS_NODEFILE"); });
  EXPECT_EQ(where(e), "nf:2:3");
  EXPECT_NE(e.message().find("unexpected character '$'"), std::string::npos) << e.what();

  e = catch_input_error([] { parse_host_per_slot("\n\n", "nf", "PBS_NODEFILE"); });
  EXPECT_NE(e.message().find("no hosts in PBS_NODEFILE (nf)"), std::string::npos) << e.what();
}

TEST(LsfHosts, DjobHostfileIsAHostPerSlot) {
  const auto hf = parse_host_per_slot("hostA\nhostA\nhostA\nhostB\n", "/home/u/.lsbatch/1.hostfile",
                                      "LSB_DJOB_HOSTFILE");
  EXPECT_EQ(slots_of(hf), (std::vector<Slots>{{"hostA", 3}, {"hostB", 1}}));
}

TEST(LsfHosts, McpuHostsArePairsOfHostAndCount) {
  EXPECT_EQ(slots_of(parse_lsf_mcpu_hosts("hostA 4 hostB 2")),
            (std::vector<Slots>{{"hostA", 4}, {"hostB", 2}}));
  EXPECT_EQ(slots_of(parse_lsf_mcpu_hosts("  hostA 1 ")), (std::vector<Slots>{{"hostA", 1}}));

  auto e = catch_input_error([] { parse_lsf_mcpu_hosts("hostA 4 hostB"); });
  EXPECT_EQ(where(e), "LSB_MCPU_HOSTS:1:9");
  EXPECT_EQ(e.field(), "slots");
  EXPECT_NE(e.message().find("host 'hostB' has no slot count"), std::string::npos);
  e = catch_input_error([] { parse_lsf_mcpu_hosts("hostA four"); });
  EXPECT_EQ(where(e), "LSB_MCPU_HOSTS:1:7");
  EXPECT_NE(e.message().find("expected a positive slot count, got 'four'"), std::string::npos);
  e = catch_input_error([] { parse_lsf_mcpu_hosts("hostA 0"); });
  EXPECT_EQ(e.field(), "slots");
}

TEST(PeHostfile, HostSlotsQueueAndRange) {
  // As sge_execd writes it (the range is UNDEFINED without core binding).
  const auto hf = parse_pe_hostfile(
      "node01 4 all.q@node01 UNDEFINED\nnode02 2 all.q@node02 0,0:0,1\n", "/spool/1.1/pe_hostfile");
  EXPECT_EQ(slots_of(hf), (std::vector<Slots>{{"node01", 4}, {"node02", 2}}));
  // Slots of one host from two queues are two lines: their sum.
  EXPECT_EQ(slots_of(parse_pe_hostfile("n1 2 a.q@n1 UNDEFINED\nn2 1 a.q@n2 UNDEFINED\n"
                                       "n1 3 b.q@n1 UNDEFINED\n",
                                       "pe")),
            (std::vector<Slots>{{"n1", 5}, {"n2", 1}}));
}

TEST(PeHostfile, MalformedLinesNameTheFileLineAndField) {
  auto e = catch_input_error([] { parse_pe_hostfile("n1 2 q UNDEFINED\nn2\n", "pe"); });
  EXPECT_EQ(where(e), "pe:2:3");
  EXPECT_EQ(e.field(), "slots");
  e = catch_input_error([] { parse_pe_hostfile("n1 -2 q UNDEFINED\n", "pe"); });
  EXPECT_EQ(where(e), "pe:1:4");
  EXPECT_NE(e.message().find("got '-2'"), std::string::npos);
  e = catch_input_error([] { parse_pe_hostfile("n1 2 q UNDEFINED extra\n", "pe"); });
  EXPECT_EQ(where(e), "pe:1:18");
  EXPECT_NE(e.hint().find("host slots queue processor-range"), std::string::npos);
}

TEST(FluxR, NodelistInBrokerRankOrderWithCoresAsSlots) {
  const auto hf = parse_flux_r(
      R"({"version": 1, "execution": {"R_lite": [{"rank": "0-1", "children": {"core": "0-3"}}],)"
      R"( "starttime": 0.0, "expiration": 0.0, "nodelist": ["flux-sample-[0-1]"]}})",
      "flux resource R");
  EXPECT_EQ(slots_of(hf), (std::vector<Slots>{{"flux-sample-0", 4}, {"flux-sample-1", 4}}));
}

TEST(FluxR, GpusWhenTheNodeHasThem) {
  const auto hf = parse_flux_r(
      R"({"version":1,"execution":{"R_lite":[{"rank":"0","children":{"core":"0-15","gpu":"0-3"}},)"
      R"({"rank":"1-2","children":{"core":"0-7"}}],"nodelist":["gpu0,cpu[1-2]"]}})",
      "R");
  EXPECT_EQ(slots_of(hf), (std::vector<Slots>{{"gpu0", 4}, {"cpu1", 8}, {"cpu2", 8}}));
}

TEST(FluxR, MalformedResourceSetsSayWhere) {
  auto e = catch_input_error([] { parse_flux_r("{\"version\": 1,", "flux resource R"); });
  EXPECT_EQ(e.pos().source, "flux resource R");
  EXPECT_NE(e.message().find("not JSON"), std::string::npos) << e.what();
  e = catch_input_error([] { parse_flux_r(R"({"version": 2, "execution": {}})", "R"); });
  EXPECT_EQ(e.field(), "version");
  e = catch_input_error([] {
    parse_flux_r(R"({"version": 1, "execution": {"R_lite": [{"rank": "0", "children": {"core": )"
                 R"("0"}}]}})",
                 "R");
  });
  EXPECT_EQ(e.field(), "nodelist");
  e = catch_input_error([] {
    parse_flux_r(R"({"version": 1, "execution": {"R_lite": [{"rank": "0-2", "children": )"
                 R"({"core": "0"}}], "nodelist": ["a,b"]}})",
                 "R");
  });
  EXPECT_EQ(e.field(), "rank");
  EXPECT_NE(e.message().find("broker rank 2 has no host: nodelist names 2"), std::string::npos);
  EXPECT_EQ(where(e), "R:1:50");  // the rank's value
  e = catch_input_error([] {
    parse_flux_r(R"({"version": 1, "execution": {"R_lite": [{"rank": "0", "children": )"
                 R"({"core": "3-1"}}], "nodelist": ["a"]}})",
                 "R");
  });
  EXPECT_EQ(e.field(), "core");
}

TEST(Idset, RangesAndSingles) {
  EXPECT_EQ(parse_idset("0-3,5", {}, "core"), (std::vector<int>{0, 1, 2, 3, 5}));
  EXPECT_EQ(parse_idset("[7]", {}, "core"), (std::vector<int>{7}));
  EXPECT_TRUE(parse_idset("", {}, "gpu").empty());
  EXPECT_EQ(catch_input_error([] { parse_idset("1,,2", {}, "core"); }).field(), "core");
}

// A probe over an environment; node files are read from disk as dlaunch does.
AllocationProbe probe(std::vector<std::string> env, std::string here = "node01") {
  AllocationProbe p;
  p.env = std::move(env);
  p.this_host = std::move(here);
  p.read_file = [](const std::string& path, const std::string&) {
    return read_input_file(path, "node file");
  };
  p.flux_resource_r = [] {
    return std::string(
        R"({"version": 1, "execution": {"R_lite": [{"rank": "0-1", "children": {"core": "0-1"}}],)"
        R"( "nodelist": ["node0[1-2]"]}})");
  };
  p.on_path = [](const std::string&) { return true; };
  return p;
}

TEST(FindAllocation, NoneWithoutASchedulersVariables) {
  EXPECT_FALSE(find_allocation(probe({"HOME=/root", "PBS_NODEFILE=", "JOB_ID=4"})));
}

TEST(FindAllocation, ThisNodeRunsLocallyTheOthersThroughTheSchedulersRemoteStart) {
  TempDir dir;
  const auto pe = dir.write("pe_hostfile",
                            "node01.cluster 2 all.q@node01 UNDEFINED\n"
                            "node02.cluster 2 all.q@node02 UNDEFINED\n");
  auto a = find_allocation(probe({"PE_HOSTFILE=" + pe, "JOB_ID=4"}, "NODE01"));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->scheduler, Scheduler::kSge);
  EXPECT_EQ(a->from, "PE_HOSTFILE=" + pe);
  ASSERT_EQ(a->hosts.hosts.size(), 2u);
  EXPECT_EQ(a->hosts.hosts[0].transport, Transport::kLocal);
  EXPECT_EQ(a->hosts.hosts[0].address, "node01.cluster");
  EXPECT_EQ(a->hosts.hosts[1].transport, Transport::kSge);
  EXPECT_EQ(a->remote_start, "qrsh -inherit");

  // Without qrsh on PATH the other nodes are reached over SSH.
  auto p = probe({"PE_HOSTFILE=" + pe});
  p.on_path = [](const std::string&) { return false; };
  a = find_allocation(p);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->hosts.hosts[1].transport, Transport::kSsh);
  EXPECT_EQ(a->remote_start, "ssh (qrsh is not on PATH)");
  // A site's wrapper is named as it is.
  p.remote_start_program = [](Transport) { return std::string("/opt/sge/qrsh-wrapper"); };
  a = find_allocation(p);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->remote_start, "ssh (/opt/sge/qrsh-wrapper is not on PATH)");
}

TEST(FindAllocation, PbsNodesOtherThanThisOneGoOverSsh) {
  TempDir dir;
  const auto nf = dir.write("7.srv", "node01\nnode01\nnode02\nnode02\n");
  auto a = find_allocation(probe({"PBS_NODEFILE=" + nf, "PBS_JOBID=7.srv"}));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->scheduler, Scheduler::kPbs);
  EXPECT_EQ(slots_of(a->hosts), (std::vector<Slots>{{"node01", 2}, {"node02", 2}}));
  EXPECT_EQ(a->hosts.hosts[0].transport, Transport::kLocal);
  EXPECT_EQ(a->hosts.hosts[1].transport, Transport::kSsh);
  EXPECT_NE(a->remote_start.find("tm_spawn"), std::string::npos);
}

TEST(FindAllocation, LsfPrefersTheHostfileOverMcpuHosts) {
  TempDir dir;
  const auto hf = dir.write("1.hostfile", "node01\nnode02\nnode02\n");
  auto a = find_allocation(
      probe({"LSB_MCPU_HOSTS=node01 4 node02 4", "LSB_DJOB_HOSTFILE=" + hf, "LSB_JOBID=1"}));
  ASSERT_TRUE(a);
  EXPECT_EQ(slots_of(a->hosts), (std::vector<Slots>{{"node01", 1}, {"node02", 2}}));
  EXPECT_EQ(a->hosts.hosts[1].transport, Transport::kLsf);
  a = find_allocation(probe({"LSB_MCPU_HOSTS=node01 4 node02 4"}));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->from, "LSB_MCPU_HOSTS");
  EXPECT_EQ(slots_of(a->hosts), (std::vector<Slots>{{"node01", 4}, {"node02", 4}}));
}

TEST(FindAllocation, FluxWinsOverTheSchedulerItRunsInside) {
  // `srun flux start` inside a Slurm allocation: the Flux jobs inherit the
  // Slurm variables, and the allocation is Flux's.
  auto a = find_allocation(probe({"SLURM_JOB_NODELIST=node[01-08]", "SLURM_JOB_ID=3",
                                  "FLUX_URI=local:///tmp/flux-x/local-0", "FLUX_JOB_ID=f2"}));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->scheduler, Scheduler::kFlux);
  EXPECT_EQ(slots_of(a->hosts), (std::vector<Slots>{{"node01", 2}, {"node02", 2}}));
  EXPECT_EQ(a->hosts.hosts[1].transport, Transport::kFlux);
  EXPECT_EQ(a->ignored, std::vector<std::string>{"SLURM_JOB_NODELIST (Slurm)"});
}

TEST(FindAllocation, SlurmComesBeforePbsLsfAndSge) {
  TempDir dir;
  const auto nf = dir.write("nf", "node09\n");
  auto a = find_allocation(probe({"PE_HOSTFILE=/nonexistent", "PBS_NODEFILE=" + nf,
                                  "SLURM_JOB_NODELIST=node[01-02]", "SLURM_JOB_ID=3"}));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->scheduler, Scheduler::kSlurm);
  EXPECT_EQ(a->hosts.hosts[1].transport, Transport::kSlurm);
  EXPECT_EQ(a->ignored, (std::vector<std::string>{"PBS_NODEFILE (PBS)", "PE_HOSTFILE (SGE)"}));
}

TEST(FindAllocation, AMissingNodeFileIsAnInputErrorNamingIt) {
  const auto e =
      catch_input_error([] { find_allocation(probe({"PBS_NODEFILE=/nonexistent/aux/7"})); });
  EXPECT_NE(std::string(e.what()).find("/nonexistent/aux/7"), std::string::npos) << e.what();
}

}  // namespace
}  // namespace dlaunch
