#include "dlaunch/proto/protocol.h"

#include <signal.h>

#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "dlaunch/codec.h"
#include "dlaunch/process.h"
#include "dlaunch/proto/channel.h"
#include "dlaunch/unique_fd.h"

using namespace dlaunch::proto;
namespace proto = dlaunch::proto;

namespace {

Message round_trip(const Message& m) {
  Decoder d;
  d.feed(encode(m));
  auto out = d.next();
  EXPECT_TRUE(out.has_value());
  EXPECT_EQ(d.pending(), 0u);
  return *out;
}

}  // namespace

TEST(Protocol, SetupRoundTripsWithWorkersAndEnvironment) {
  proto::Setup s;
  s.job_id = "job-1";
  s.node_rank = 3;
  s.reserve_master_port = true;
  s.master_port = 29500;
  s.kill_grace_ms = 1234;
  s.workdir = "/home/a b";
  s.workers.push_back({7, 1, {"python3", "-c", "print('x y')"}, {{"RANK", "7"}, {"A", ""}}});
  s.store_secret = "secret";
  s.store_port = 29400;
  s.mpi = true;
  s.node_names = {"n0", "n1"};
  s.ranks_per_node = {2, 3};
  s.ranks_on_host = 5;
  s.bind_to = "core";
  s.map_by = "numa:PE=2";
  s.oversubscribe = true;
  s.host_rank_offset = 3;
  s.omp_default = true;
  s.progress_interval_ms = 2500;
  s.node_of_rank = {0, 1, 0, 1, 1};
  s.app_sizes = {1, 4};
  proto::WorkerSpec second{.rank = 8, .local_rank = 2, .argv = {"server"}, .env = {}};
  second.workdir = "/srv/app";
  second.stdin_pipe = true;
  s.workers.push_back(second);
  auto back = std::get<proto::Setup>(round_trip(s));
  EXPECT_EQ(back.job_id, "job-1");
  EXPECT_EQ(back.node_rank, 3);
  EXPECT_TRUE(back.reserve_master_port);
  EXPECT_EQ(back.master_port, 29500);
  EXPECT_EQ(back.kill_grace_ms, 1234u);
  EXPECT_EQ(back.workdir, "/home/a b");
  ASSERT_EQ(back.workers.size(), 2u);
  EXPECT_EQ(back.workers[0].rank, 7);
  EXPECT_EQ(back.workers[0].workdir, "");
  EXPECT_FALSE(back.workers[0].stdin_pipe);
  EXPECT_EQ(back.workers[1].argv, (std::vector<std::string>{"server"}));
  EXPECT_EQ(back.workers[1].workdir, "/srv/app");
  EXPECT_TRUE(back.workers[1].stdin_pipe);
  EXPECT_EQ(back.node_of_rank, (std::vector<std::int32_t>{0, 1, 0, 1, 1}));
  EXPECT_EQ(back.workers[0].argv, (std::vector<std::string>{"python3", "-c", "print('x y')"}));
  EXPECT_EQ(back.workers[0].env, (Env{{"RANK", "7"}, {"A", ""}}));
  EXPECT_EQ(back.store_secret, "secret");
  EXPECT_EQ(back.store_port, 29400);
  EXPECT_TRUE(back.mpi);
  EXPECT_EQ(back.node_names, (std::vector<std::string>{"n0", "n1"}));
  EXPECT_EQ(back.ranks_per_node, (std::vector<std::int32_t>{2, 3}));
  EXPECT_EQ(back.ranks_on_host, 5);
  EXPECT_EQ(back.bind_to, "core");
  EXPECT_EQ(back.map_by, "numa:PE=2");
  EXPECT_TRUE(back.oversubscribe);
  EXPECT_EQ(back.host_rank_offset, 3);
  EXPECT_TRUE(back.omp_default);
  EXPECT_EQ(back.progress_interval_ms, 2500u);
  EXPECT_EQ(back.app_sizes, (std::vector<std::int32_t>{1, 4}));
}

TEST(Protocol, StartedCarriesTheRanksBinding) {
  static_assert(kProtocolVersion >= 10);  // 9 added placement, 10 progress_interval_ms
  auto back = std::get<Started>(round_trip(Started{.rank = 1,
                                                   .pid = 2,
                                                   .cpus = "0-3,8",
                                                   .cpu_picture = "[BB/BB/../..]",
                                                   .binding_note = "oversubscribed"}));
  EXPECT_EQ(back.cpus, "0-3,8");
  EXPECT_EQ(back.cpu_picture, "[BB/BB/../..]");
  EXPECT_EQ(back.binding_note, "oversubscribed");
  EXPECT_EQ(std::get<Started>(round_trip(Started{.rank = 1})).cpus, "");
}

TEST(Protocol, EveryMessageRoundTrips) {
  std::vector<Message> all = {
      Hello{.agent_version = "0.1", .hostname = "h", .pid = 42},
      proto::Setup{},
      Ready{.master_port = 4000},
      Start{.env = {{"MASTER_ADDR", "10.0.0.1"}}},
      Started{.rank = 2, .pid = 99, .cpus = "1", .cpu_picture = "[./B]", .binding_note = "n"},
      Output{.rank = 1, .stream = Stream::kStderr, .partial = true, .data = std::string("a\0b", 3)},
      Exited{
          .rank = 5, .pid = 7, .kind = ExitKind::kSignaled, .signal = 11, .runtime_ms = 1ull << 40},
      Abort{.reason = "r", .immediate = true},
      Heartbeat{},
      Shutdown{},
      Fatal{.message = "boom"},
      Done{.leftovers_killed = 3},
      FenceUp{.seq = 2, .data = std::string("\0blob", 5)},
      FenceDown{.seq = 2, .data = "all blobs"},
      WorkerAbort{.rank = 3, .status = 7, .message = "bye"},
      Probe{.port = 29500, .timeout_ms = 2000, .addresses = {"10.0.0.1", "fd00::1"}},
      ProbeResult{.outcomes = {{.address = "10.0.0.1", .reached = true, .interface = "eth0"},
                               {.address = "fd00::1", .error = "Network is unreachable"}}},
      PauseOutput{.pause = true},
      SignalRanks{.signal = 10},
      CollectStacks{.request_id = 9, .timeout_ms = 10000, .python_abort = true},
      Stacks{.request_id = 9,
             .tool = "eu-stack",
             .ranks = {{.rank = 0, .pid = 10, .native = "TID 10:\n#0 0x1 f\n"},
                       {.rank = 1, .pid = 11, .python = "Current thread", .error = "gone"}}},
      StdinData{.data = std::string("line\n\0bin", 9)},
      StdinEof{},
      StdinAck{.bytes = (1ull << 33) + 5},
      Progress{.collectives = (1ull << 40) + 3},
      ProgressDamaged{.rank = 3, .what = "truncated its progress memory (0 of 64 bytes left)"},
      NetListen{.token = "0123abcd"},
      NetListening{.port = 40000, .error = ""},
      NetSend{.round = 2,
              .address = "10.0.0.2",
              .port = 40000,
              .token = "0123abcd",
              .duration_ms = 1000,
              .timeout_ms = 10000},
      NetSent{.round = 2, .bytes = 1ull << 34, .micros = 1000123, .error = "reset"},
      ImagePull{.image = "nvcr.io/nvidia/pytorch:24.10-py3", .done = true},
      Reattach{.job_id = "6e8d4de4",
               .node_rank = 2,
               .secret = "s3cr3t",
               .head_boot_id = "b",
               .head_pid = 77,
               .head_start_ticks = 1ull << 35},
      Resumed{.pid = 12,
              .start_ticks = 99,
              .boot_id = "b",
              .headless_ms = 4200,
              .held_bytes = 1ull << 33,
              .ready = Ready{.master_port = 29500, .store_port = 40001, .store_path = "/t/s"}},
  };
  for (const auto& m : all) {
    auto back = round_trip(m);
    EXPECT_EQ(back.index(), m.index()) << message_name(m);
    EXPECT_EQ(encode(back), encode(m)) << message_name(m);
  }
}

// Issue 28: each message's number on the wire is pinned, not its place in
// the variant: an agent and a head of neighbouring releases must read each
// other's frames as what they are. A new message takes a new number; these
// never change.
TEST(Protocol, EveryMessageKeepsItsWireId) {
  using namespace dlaunch::proto;
  const std::pair<Message, std::uint16_t> pinned[] = {{Hello{}, 1},
                                                      {dlaunch::proto::Setup{}, 2},
                                                      {Ready{}, 3},
                                                      {Start{}, 4},
                                                      {Started{}, 5},
                                                      {Output{}, 6},
                                                      {Exited{}, 7},
                                                      {Abort{}, 8},
                                                      {Heartbeat{}, 9},
                                                      {Shutdown{}, 10},
                                                      {Fatal{}, 11},
                                                      {Done{}, 12},
                                                      {FenceUp{}, 13},
                                                      {FenceDown{}, 14},
                                                      {WorkerAbort{}, 15},
                                                      {Probe{}, 16},
                                                      {ProbeResult{}, 17},
                                                      {PauseOutput{}, 18},
                                                      {SignalRanks{.signal = 15}, 19},
                                                      {CollectStacks{}, 20},
                                                      {Stacks{}, 21},
                                                      {StdinData{}, 22},
                                                      {StdinEof{}, 23},
                                                      {StdinAck{}, 24},
                                                      {Progress{}, 25},
                                                      {ProgressDamaged{}, 26},
                                                      {NetListen{}, 27},
                                                      {NetListening{}, 28},
                                                      {NetSend{}, 29},
                                                      {NetSent{}, 30},
                                                      {ImagePull{}, 31},
                                                      {Reattach{}, 32},
                                                      {Resumed{}, 33}};
  ASSERT_EQ(std::size(pinned), std::variant_size_v<Message>);
  for (const auto& [msg, id] : pinned) {
    const std::string frame = encode(msg);
    // The header: u32 payload length, u16 type, u16 flags.
    const auto type = static_cast<std::uint16_t>(static_cast<unsigned char>(frame[4]) |
                                                 static_cast<unsigned char>(frame[5]) << 8);
    EXPECT_EQ(type, id) << message_name(msg);
    Decoder d;
    d.feed(frame);
    const auto back = d.next();
    ASSERT_TRUE(back) << message_name(msg);
    EXPECT_EQ(back->index(), msg.index()) << message_name(msg);
  }
}

TEST(Protocol, SignalRanksCarriesTheSignalNumber) {
  auto back = std::get<SignalRanks>(round_trip(SignalRanks{.signal = 20}));
  EXPECT_EQ(back.signal, 20);
  EXPECT_STREQ(message_name(SignalRanks{}), "SignalRanks");
}

TEST(Protocol, SignalRanksWithoutAValidSignalIsRejected) {
  for (std::int32_t bad : {0, -1, 65, 1000}) {
    std::string wire = encode(SignalRanks{.signal = bad});
    Decoder d;
    d.feed(wire);
    EXPECT_THROW(d.next(), ProtocolError) << bad;
  }
}

TEST(Protocol, DecoderAssemblesFramesFedOneByteAtATime) {
  std::string wire =
      encode(Started{.rank = 1, .pid = 2}) + encode(Output{.rank = 1, .data = "x\n"});
  Decoder d;
  int got = 0;
  for (char c : wire) {
    d.feed(std::string_view(&c, 1));
    while (auto m = d.next()) ++got;
  }
  EXPECT_EQ(got, 2);
  EXPECT_EQ(d.pending(), 0u);
}

TEST(Protocol, TruncatedFrameWaitsAndReportsPendingBytes) {
  std::string wire = encode(Fatal{.message = "hello"});
  Decoder d;
  d.feed(std::string_view(wire).substr(0, wire.size() - 1));
  EXPECT_FALSE(d.next().has_value());
  EXPECT_EQ(d.pending(), wire.size() - 1);
}

TEST(Protocol, OversizedFrameIsRejectedFromItsHeader) {
  std::string header(8, '\0');
  const std::uint32_t len = kMaxFrameBytes + 1;
  for (int i = 0; i < 4; ++i)
    header[static_cast<std::size_t>(i)] = static_cast<char>((len >> (8 * i)) & 0xff);
  header[4] = 1;
  Decoder d;
  d.feed(header);
  EXPECT_THROW(d.next(), ProtocolError);
}

TEST(Protocol, PayloadShorterThanItsFieldsIsRejected) {
  // A Fatal whose string claims 100 bytes but the frame holds 4.
  std::string wire = encode(Fatal{.message = "abcd"});
  wire[8] = 100;
  Decoder d;
  d.feed(wire);
  EXPECT_THROW(d.next(), ProtocolError);
}

TEST(Protocol, TrailingBytesInAFrameAreRejected) {
  std::string wire = encode(Ready{.master_port = 1});
  wire[0] = static_cast<char>(wire[0] + 1);  // length one more than the fields
  wire.push_back('x');
  Decoder d;
  d.feed(wire);
  EXPECT_THROW(d.next(), ProtocolError);
}

TEST(Protocol, UnknownTypeAndBadMagicAreRejected) {
  EXPECT_THROW(decode_payload(200, ""), ProtocolError);
  EXPECT_THROW(decode_payload(0, ""), ProtocolError);
  std::string hello = encode(Hello{});
  hello[8] = 'X';
  Decoder d;
  d.feed(hello);
  EXPECT_THROW(d.next(), ProtocolError);
}

TEST(Protocol, AHelloOfAnotherVersionIsReadUpToItsPidAndKeptAsItCame) {
  // An agent of protocol 11 ends its Hello after the pid; one of a later
  // protocol may carry anything there. Both are read (the head must learn the
  // version to replace the agent) and encode back to the same bytes.
  Hello old{.version = static_cast<std::uint16_t>(kProtocolVersion - 1),
            .agent_version = "0.1.0",
            .hostname = "node0",
            .pid = 4242};
  std::string wire = encode(old);
  Decoder d;
  d.feed(wire);
  auto back = std::get<Hello>(*d.next());
  EXPECT_EQ(back.version, kProtocolVersion - 1);
  EXPECT_EQ(back.hostname, "node0");
  EXPECT_EQ(back.pid, 4242);
  EXPECT_EQ(back.foreign_tail, "");
  EXPECT_EQ(encode(back), wire);

  Hello later = old;
  later.version = static_cast<std::uint16_t>(kProtocolVersion + 1);
  later.foreign_tail = std::string("\x92\x10\0\0", 4);  // the fuzzer's find: a stray u32
  wire = encode(later);
  d.feed(wire);
  back = std::get<Hello>(*d.next());
  EXPECT_EQ(back.foreign_tail, later.foreign_tail);
  EXPECT_EQ(back.boot_id, "");
  EXPECT_EQ(encode(back), wire);
}

TEST(Protocol, HugeCountsCannotAllocateBeyondTheFrame) {
  // Setup whose count of node_of_rank (followed by ranks_on_host, two
  // empty strings, a bool, host_rank_offset, a bool and
  // progress_interval_ms: 22 bytes, the head's empty boot id, pid and start
  // time: 16 bytes, the default container: 41 bytes, app_sizes' count: 4
  // bytes) says 2^32-1 in a tiny frame.
  std::string wire = encode(proto::Setup{});
  const std::size_t count_at = wire.size() - 26 - 16 - 41 - 4;
  for (std::size_t i = 0; i < 4; ++i) wire[count_at + i] = static_cast<char>(0xff);
  Decoder d;
  d.feed(wire);
  EXPECT_THROW(d.next(), ProtocolError);
}

TEST(Protocol, ExitedCarriesTheWorkersErrorFile) {
  // Version 3 added the error file to Exited; an agent of version 2 is refused at Hello.
  static_assert(kProtocolVersion >= 3);
  Exited ex{.rank = 4, .pid = 9, .code = 1, .runtime_ms = 20};
  ex.error_file = "/tmp/dlaunch-j-node0-1/error.4.json";
  ex.error_file_data = std::string(kMaxErrorFileBytes, 'e');
  auto back = std::get<Exited>(round_trip(ex));
  EXPECT_EQ(back.rank, 4);
  EXPECT_EQ(back.code, 1);
  EXPECT_EQ(back.error_file, ex.error_file);
  EXPECT_EQ(back.error_file_data, ex.error_file_data);
  auto plain = std::get<Exited>(round_trip(Exited{.rank = 1}));
  EXPECT_EQ(plain.error_file, "");
  EXPECT_EQ(plain.error_file_data, "");
}

TEST(Protocol, ReadyCarriesTheNodesInterfaces) {
  // Version 5 added the interfaces, the probe and Start's address.
  static_assert(kProtocolVersion >= 5);
  Ready r{.master_port = 29500};
  r.interfaces = {{.name = "lo",
                   .address = "127.0.0.1",
                   .prefix_len = 8,
                   .family = AddressFamily::kIpv4,
                   .up = true,
                   .loopback = true},
                  {.name = "eth0",
                   .address = "fd00::2",
                   .prefix_len = 64,
                   .family = AddressFamily::kIpv6,
                   .up = true},
                  {.name = "docker0", .address = "172.17.0.1", .prefix_len = 16}};
  auto back = std::get<Ready>(round_trip(r));
  ASSERT_EQ(back.interfaces.size(), 3u);
  EXPECT_EQ(back.interfaces[0].name, "lo");
  EXPECT_TRUE(back.interfaces[0].loopback);
  EXPECT_EQ(back.interfaces[0].prefix_len, 8);
  EXPECT_EQ(back.interfaces[1].address, "fd00::2");
  EXPECT_EQ(back.interfaces[1].family, AddressFamily::kIpv6);
  EXPECT_TRUE(back.interfaces[1].up);
  EXPECT_FALSE(back.interfaces[1].loopback);
  EXPECT_EQ(back.interfaces[2].name, "docker0");
  EXPECT_FALSE(back.interfaces[2].up);
  EXPECT_EQ(encode(back), encode(r));
}

TEST(Protocol, TheGpuTestsSizeTravels) {
  // Version 18: --check's GPU test.
  static_assert(kProtocolVersion >= 18);
  proto::Setup s;
  s.check = true;
  s.gpu_test_mb = 512;
  EXPECT_EQ(std::get<proto::Setup>(round_trip(s)).gpu_test_mb, 512u);
  EXPECT_EQ(std::get<proto::Setup>(round_trip(proto::Setup{})).gpu_test_mb, 0u);
}

TEST(Protocol, TheHeadGraceAndAResumedNodesReadyTravel) {
  // Version 17: a job that survives its head.
  static_assert(kProtocolVersion >= 17);
  proto::Setup s;
  s.head_grace_ms = 300000;
  EXPECT_EQ(std::get<proto::Setup>(round_trip(s)).head_grace_ms, 300000u);
  EXPECT_EQ(std::get<proto::Setup>(round_trip(proto::Setup{})).head_grace_ms, 0u);
  Resumed r{.pid = 9, .headless_ms = 1234};
  r.ready.store_port = 40001;
  r.ready.interfaces = {{.name = "eth0", .address = "10.0.0.2", .prefix_len = 24, .up = true}};
  const auto back = std::get<Resumed>(round_trip(r));
  EXPECT_EQ(back.headless_ms, 1234u);
  EXPECT_EQ(back.ready.store_port, 40001);
  ASSERT_EQ(back.ready.interfaces.size(), 1u);
  EXPECT_EQ(back.ready.interfaces[0].address, "10.0.0.2");
}

TEST(Protocol, ACheckSetupAndItsReadyCarryWhatCheckShows) {
  // Version 16: --check as a job stopped at Ready.
  static_assert(kProtocolVersion >= 16);
  proto::Setup s;
  s.check = true;
  s.check_scripts = {"train.py", "/abs/eval.py"};
  s.count_gpus = true;
  const auto sb = std::get<proto::Setup>(round_trip(s));
  EXPECT_TRUE(sb.check);
  EXPECT_EQ(sb.check_scripts, s.check_scripts);
  EXPECT_TRUE(sb.count_gpus);
  EXPECT_FALSE(std::get<proto::Setup>(round_trip(proto::Setup{})).check);

  // The agent's executable in its Hello: an installed agent or the cached copy.
  EXPECT_EQ(
      std::get<Hello>(round_trip(Hello{.exe = "/home/u/.cache/dlaunch/v-h/dlaunch-agent"})).exe,
      "/home/u/.cache/dlaunch/v-h/dlaunch-agent");

  Ready r;
  r.problems = {{.column = "wdir", .message = "working directory '/nope' does not exist"},
                {.column = "", .message = "no cgroup"}};
  r.facts = {{"kernel", "6.1.0"}, {"mem_avail_kb", "123"}, {"empty", ""}};
  r.topology = "1 package, 2 cores";
  r.gpus = 4;
  const auto rb = std::get<Ready>(round_trip(r));
  EXPECT_EQ(rb.problems, r.problems);
  EXPECT_EQ(rb.facts, r.facts);
  EXPECT_EQ(rb.topology, r.topology);
  EXPECT_EQ(rb.gpus, 4);
  EXPECT_EQ(std::get<Ready>(round_trip(Ready{})).gpus, -1);
}

TEST(Protocol, SetupStartProbeAndItsResultRoundTrip) {
  proto::Setup s;
  s.accept_probes = true;
  EXPECT_TRUE(std::get<proto::Setup>(round_trip(s)).accept_probes);
  EXPECT_FALSE(std::get<proto::Setup>(round_trip(proto::Setup{})).accept_probes);

  auto start = std::get<Start>(round_trip(Start{.env = {{"A", "1"}}, .net_address = "fd00::2"}));
  EXPECT_EQ(start.net_address, "fd00::2");
  EXPECT_EQ(start.env, (Env{{"A", "1"}}));

  auto probe =
      std::get<Probe>(round_trip(Probe{.port = 1234, .timeout_ms = 1500, .addresses = {"a", "b"}}));
  EXPECT_EQ(probe.port, 1234);
  EXPECT_EQ(probe.timeout_ms, 1500u);
  EXPECT_EQ(probe.addresses, (std::vector<std::string>{"a", "b"}));

  auto result = std::get<ProbeResult>(round_trip(ProbeResult{
      .outcomes = {
          {.address = "10.0.0.1", .reached = true, .interface = "eth0"},
          {.address = "172.17.0.1", .error = "Connection refused", .interface = "docker0"}}}));
  ASSERT_EQ(result.outcomes.size(), 2u);
  EXPECT_TRUE(result.outcomes[0].reached);
  EXPECT_EQ(result.outcomes[0].interface, "eth0");
  EXPECT_FALSE(result.outcomes[1].reached);
  EXPECT_EQ(result.outcomes[1].error, "Connection refused");
  EXPECT_STREQ(message_name(Probe{}), "Probe");
  EXPECT_STREQ(message_name(ProbeResult{}), "ProbeResult");
}

TEST(Protocol, StdinMessagesCarryTheirBytes) {
  const std::string big(kStdinChunk, 'q');
  EXPECT_EQ(std::get<StdinData>(round_trip(StdinData{.data = big})).data, big);
  EXPECT_EQ(std::get<StdinAck>(round_trip(StdinAck{.bytes = 123456789012ull})).bytes,
            123456789012ull);
  EXPECT_TRUE(std::holds_alternative<StdinEof>(round_trip(StdinEof{})));
  EXPECT_STREQ(message_name(StdinAck{}), "StdinAck");
}

TEST(Protocol, PauseOutputCarriesItsFlag) {
  EXPECT_TRUE(std::get<PauseOutput>(round_trip(PauseOutput{.pause = true})).pause);
  EXPECT_FALSE(std::get<PauseOutput>(round_trip(PauseOutput{.pause = false})).pause);
  EXPECT_STREQ(message_name(PauseOutput{}), "PauseOutput");
  // One byte of payload, no more.
  std::string wire = encode(PauseOutput{.pause = true});
  EXPECT_EQ(wire.size(), kHeaderBytes + 1);
}

TEST(Protocol, StacksRoundTripFieldByField) {
  auto req = std::get<CollectStacks>(
      round_trip(CollectStacks{.request_id = 7, .timeout_ms = 1500, .python_abort = true}));
  EXPECT_EQ(req.request_id, 7u);
  EXPECT_EQ(req.timeout_ms, 1500u);
  EXPECT_TRUE(req.python_abort);
  auto st = std::get<Stacks>(round_trip(
      Stacks{.request_id = 7,
             .tool = "gdb",
             .ranks = {{.rank = 3, .pid = 42, .native = std::string("a\0b", 3), .python = "py"},
                       {.rank = 4, .pid = 43, .error = "ptrace: Operation not permitted"}}}));
  EXPECT_EQ(st.request_id, 7u);
  EXPECT_EQ(st.tool, "gdb");
  ASSERT_EQ(st.ranks.size(), 2u);
  EXPECT_EQ(st.ranks[0].rank, 3);
  EXPECT_EQ(st.ranks[0].pid, 42);
  EXPECT_EQ(st.ranks[0].native, std::string("a\0b", 3));
  EXPECT_EQ(st.ranks[0].python, "py");
  EXPECT_EQ(st.ranks[1].error, "ptrace: Operation not permitted");
  EXPECT_STREQ(message_name(CollectStacks{}), "CollectStacks");
  EXPECT_STREQ(message_name(Stacks{}), "Stacks");
  static_assert(kProtocolVersion >= 6);
}

namespace {

// A frame whose payload is `payload`, of message type `type` (no checks).
std::string frame(std::uint16_t type, const std::string& payload) {
  std::string out;
  dlaunch::codec::Writer w(out);
  w.u32(static_cast<std::uint32_t>(payload.size())).u16(type).u16(0);
  out += payload;
  return out;
}

std::uint16_t type_of(const Message& m) { return static_cast<std::uint16_t>(m.index() + 1); }

}  // namespace

TEST(Protocol, MalformedNetworkMessagesAreRejected) {
  const auto decodes = [](const std::string& wire) {
    Decoder d;
    d.feed(wire);
    return d.next().has_value();
  };
  // An address family other than 4 or 6.
  Ready r;
  r.interfaces = {{.name = "eth0", .address = "10.0.0.1", .family = AddressFamily::kIpv4}};
  std::string wire = encode(r);
  ASSERT_TRUE(decodes(wire));
  // After the interfaces (version 16): no problems, no facts, no topology
  // (three empty counts) and the GPU count.
  constexpr std::size_t kCheckTail = 16;
  // Fields from the interfaces' end: loopback, up, family.
  wire[wire.size() - kCheckTail - 3] = 5;
  EXPECT_THROW(decodes(wire), ProtocolError);
  // A boolean that is neither 0 nor 1 (loopback).
  wire = encode(r);
  wire[wire.size() - kCheckTail - 1] = 2;
  EXPECT_THROW(decodes(wire), ProtocolError);
  // Counts beyond what the frame holds (Ready's: its problems').
  for (const Message& m :
       {Message{Ready{}}, Message{Probe{}}, Message{ProbeResult{}}, Message{Stacks{}}}) {
    std::string bytes = encode(m);
    const std::size_t end = bytes.size() - (std::holds_alternative<Ready>(m) ? kCheckTail - 4 : 0);
    for (std::size_t i = end - 4; i < end; ++i) bytes[i] = static_cast<char>(0xff);
    EXPECT_THROW(decodes(bytes), ProtocolError) << message_name(m);
  }
  // Truncated: a ProbeResult whose outcome lacks its interface; a Start
  // without its address (a version 4 Start).
  std::string payload;
  dlaunch::codec::Writer w(payload);
  w.u32(1).bytes("10.0.0.1").boolean(true).bytes("");
  EXPECT_THROW(decodes(frame(type_of(ProbeResult{}), payload)), ProtocolError);
  std::string old_start;
  dlaunch::codec::Writer(old_start).u32(0);
  EXPECT_THROW(decodes(frame(type_of(Start{}), old_start)), ProtocolError);
  // Trailing bytes after a Probe's addresses.
  payload.clear();
  dlaunch::codec::Writer(payload).u16(1).u32(2).u32(1).bytes("a").u8(0);
  EXPECT_THROW(decodes(frame(type_of(Probe{}), payload)), ProtocolError);
  // A Stacks entry without its error field; a CollectStacks with a bad boolean.
  payload.clear();
  dlaunch::codec::Writer(payload)
      .u32(1)
      .bytes("eu-stack")
      .u32(1)
      .i32(0)
      .i32(5)
      .bytes("n")
      .bytes("p");
  EXPECT_THROW(decodes(frame(type_of(Stacks{}), payload)), ProtocolError);
  payload.clear();
  dlaunch::codec::Writer(payload).u32(1).u32(2).u8(3);
  EXPECT_THROW(decodes(frame(type_of(CollectStacks{}), payload)), ProtocolError);
}

// PipeChannel::read_pending: what a heartbeat timer calls before it declares
// the peer silent. It must hand over, synchronously and without the event
// loop running, every frame already waiting, and nothing twice afterwards.
class PipeChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto [to_r, to_w] = dlaunch::make_pipe();      // the test writes, the channel reads
    auto [from_r, from_w] = dlaunch::make_pipe();  // the channel writes
    dlaunch::set_nonblocking(to_r.get(), true);
    writer_ = std::move(to_w);
    unread_ = std::move(from_r);
    channel_ = std::make_unique<PipeChannel>(
        io_, to_r.release(), from_w.release(),
        PipeChannel::Callbacks{.on_message = [this](Message&& m) { got_.push_back(std::move(m)); },
                               .on_close = [this](const std::string& r) { closed_.push_back(r); }});
    channel_->start();
  }

  boost::asio::io_context io_;
  dlaunch::UniqueFd writer_;
  dlaunch::UniqueFd unread_;
  std::unique_ptr<PipeChannel> channel_;
  std::vector<Message> got_;
  std::vector<std::string> closed_;
};

TEST_F(PipeChannelTest, ReadPendingDispatchesWhatIsWaitingWithoutTheLoop) {
  channel_->read_pending();  // nothing there: returns at once
  EXPECT_TRUE(got_.empty());
  EXPECT_TRUE(channel_->is_open());

  std::string wire = encode(Message{Heartbeat{}});
  encode(Message{Started{.rank = 3, .pid = 77}}, wire);
  ASSERT_TRUE(dlaunch::write_all(writer_.get(), wire));
  channel_->read_pending();  // the io_context has not run once
  ASSERT_EQ(got_.size(), 2u);
  EXPECT_TRUE(std::holds_alternative<Heartbeat>(got_[0]));
  ASSERT_TRUE(std::holds_alternative<Started>(got_[1]));
  EXPECT_EQ(std::get<Started>(got_[1]).rank, 3);

  io_.poll();  // the readiness wait armed by start() finds nothing new
  EXPECT_EQ(got_.size(), 2u);
  ASSERT_TRUE(dlaunch::write_all(writer_.get(), encode(Message{Heartbeat{}})));
  io_.poll();  // and the channel still reads through the loop
  EXPECT_EQ(got_.size(), 3u);
  EXPECT_TRUE(closed_.empty());
}

TEST_F(PipeChannelTest, ReadPendingReportsAPeerThatHasGone) {
  ASSERT_TRUE(dlaunch::write_all(writer_.get(), encode(Message{Heartbeat{}})));
  writer_.reset();
  channel_->read_pending();  // the frame first (a short read ends one wake-up)
  EXPECT_EQ(got_.size(), 1u);
  channel_->read_pending();  // then the end of the stream
  EXPECT_EQ(got_.size(), 1u);
  ASSERT_EQ(closed_.size(), 1u);
  EXPECT_EQ(closed_[0], "end of stream");
  EXPECT_FALSE(channel_->is_open());
  channel_->read_pending();  // closed: a no-op
  EXPECT_EQ(closed_.size(), 1u);
}

// A peer that stops reading (an agent that ended after saying Done) is not
// lost while what it wrote before may still be on its way: writing stops,
// its last messages are read, and the channel ends at their end, saying why
// writing stopped. (Before, the write error ended the channel at once, and a
// 64-node job under ASan failed on an agent that had already said Done.)
TEST_F(PipeChannelTest, APeerThatStoppedReadingIsReadToItsEnd) {
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  struct sigaction before {};
  ::sigaction(SIGPIPE, &ignore, &before);
  unread_.reset();  // the peer reads no more
  channel_->send(Heartbeat{});
  io_.poll();
  EXPECT_TRUE(closed_.empty());
  EXPECT_TRUE(channel_->is_open());
  ASSERT_TRUE(dlaunch::write_all(writer_.get(), encode(Message{Done{}})));
  io_.poll();
  ASSERT_EQ(got_.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<Done>(got_[0]));
  channel_->send(Heartbeat{});  // dropped: nothing more is written
  writer_.reset();              // the peer has gone
  io_.poll();
  ASSERT_EQ(closed_.size(), 1u);
  EXPECT_EQ(closed_[0], "write error: Broken pipe");
  EXPECT_FALSE(channel_->is_open());
  ::sigaction(SIGPIPE, &before, nullptr);
}

// An idle reader frees its buffer, never bytes that do not yet make a frame.
TEST(Protocol, ReleaseIfEmptyKeepsAPartialFrameAndFreesOnlyWhatWasTaken) {
  const std::string one = encode(Message{Heartbeat{}});
  const std::string two = encode(Message{Fatal{"x"}});
  Decoder d;
  d.feed(one + two.substr(0, 3));
  ASSERT_TRUE(d.next().has_value());
  EXPECT_FALSE(d.next().has_value());
  d.release_if_empty();  // three bytes of the second frame are held: kept
  EXPECT_EQ(d.pending(), 3u);
  d.feed(two.substr(3));
  const auto m = d.next();
  ASSERT_TRUE(m.has_value());
  ASSERT_NE(std::get_if<Fatal>(&*m), nullptr);
  EXPECT_EQ(std::get<Fatal>(*m).message, "x");
  d.release_if_empty();
  EXPECT_EQ(d.pending(), 0u);
  d.feed(one);  // and it goes on after a release
  EXPECT_TRUE(d.next().has_value());
}

TEST(Protocol, SetupCarriesTheContainer) {
  proto::Setup s;
  s.container.image = "localhost/img:1";
  s.container.runtime = "podman";
  s.container.mounts = {"/data:/data:ro", "/scratch"};
  s.container.workdir = "/work";
  s.container.env = {"NCCL_DEBUG", "PATH"};
  s.container.mount_home = true;
  s.container.entrypoint = true;
  s.container.pull = "never";
  s.container.shm_size = "16g";
  const auto back = std::get<proto::Setup>(round_trip(s)).container;
  EXPECT_EQ(back.image, "localhost/img:1");
  EXPECT_EQ(back.runtime, "podman");
  EXPECT_EQ(back.mounts, s.container.mounts);
  EXPECT_EQ(back.workdir, "/work");
  EXPECT_EQ(back.env, s.container.env);
  EXPECT_TRUE(back.mount_home);
  EXPECT_TRUE(back.entrypoint);
  EXPECT_EQ(back.pull, "never");
  EXPECT_EQ(back.shm_size, "16g");
  // None given: none on the other side.
  EXPECT_TRUE(std::get<proto::Setup>(round_trip(proto::Setup{})).container.image.empty());
}
