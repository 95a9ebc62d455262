// Writes the seed inputs of protocol_fuzz and store_fuzz: valid frames of
// every message type and every store operation. The seeds are committed under
// tests/fuzz/corpus/; run this again when a format changes:
//   build/fuzz/bin/fuzz_make_seeds tests/fuzz/corpus
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "dlaunch/proto/protocol.h"
#include "store/wire.h"

namespace fs = std::filesystem;
namespace proto = dlaunch::proto;
using dlaunch::comm::detail::Op;
using dlaunch::comm::detail::Writer;

namespace {

void write(const fs::path& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary) << bytes;
}

void protocol_seeds(const fs::path& dir) {
  proto::Setup setup{
      .job_id = "job-1", .node_rank = 1, .reserve_master_port = true, .workdir = "/tmp"};
  setup.workers.push_back({.rank = 2,
                           .local_rank = 0,
                           .argv = {"python3", "train.py"},
                           .env = {{"CUDA_VISIBLE_DEVICES", "0"}}});
  setup.workers.push_back({.rank = 3,
                           .local_rank = 1,
                           .argv = {"python3", "train.py"},
                           .env = {},
                           .workdir = "/srv",
                           .stdin_pipe = true});
  setup.node_of_rank = {0, 1, 0, 1};
  setup.store_secret = "secret";
  setup.mpi = true;
  setup.node_names = {"node0", "node1"};
  setup.ranks_per_node = {2, 2};
  setup.accept_probes = true;
  setup.bind_to = "core";
  setup.map_by = "numa:PE=2";
  setup.host_rank_offset = 2;
  proto::Ready ready{.master_port = 29500, .store_port = 29501};
  ready.interfaces = {
      {.name = "lo", .address = "127.0.0.1", .prefix_len = 8, .up = true, .loopback = true},
      {.name = "eth0",
       .address = "fd00::2",
       .prefix_len = 64,
       .family = proto::AddressFamily::kIpv6,
       .up = true}};
  const std::vector<std::pair<std::string, proto::Message>> messages = {
      {"hello", proto::Hello{.agent_version = "0.1.0", .hostname = "node0", .pid = 4242}},
      {"setup", setup},
      {"ready", ready},
      {"start", proto::Start{.env = {{"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}},
                             .net_address = "10.0.0.1"}},
      {"started",
       proto::Started{.rank = 2, .pid = 777, .cpus = "0-3", .cpu_picture = "[BB/BB/../..]"}},
      {"output", proto::Output{.rank = 2, .stream = proto::Stream::kStderr, .data = "line\n"}},
      {"exited", proto::Exited{.rank = 2,
                               .pid = 777,
                               .kind = proto::ExitKind::kSignaled,
                               .signal = 9,
                               .runtime_ms = 1234,
                               .message = "killed"}},
      {"abort", proto::Abort{.reason = "rank 1 failed", .immediate = true}},
      {"heartbeat", proto::Heartbeat{}},
      {"shutdown", proto::Shutdown{}},
      {"fatal", proto::Fatal{.message = "cannot fork"}},
      {"done", proto::Done{.leftovers_killed = 1}},
      {"fence_up", proto::FenceUp{.seq = 0, .data = std::string("\x01\x02\x00\x03", 4)}},
      {"fence_down", proto::FenceDown{.seq = 0, .data = std::string("\x01\x02\x00\x03", 4)}},
      {"worker_abort", proto::WorkerAbort{.rank = 1, .status = 3, .message = "MPI_Abort"}},
      {"probe",
       proto::Probe{
           .port = 29500, .timeout_ms = 2000, .addresses = {"10.0.0.1", "fd00::1", "172.17.0.1"}}},
      {"probe_result",
       proto::ProbeResult{
           .outcomes = {{.address = "10.0.0.1", .reached = true, .interface = "eth0"},
                        {.address = "fd00::1", .error = "Network is unreachable"}}}},
      {"signal_ranks", proto::SignalRanks{.signal = 10}},
      {"stdin_data", proto::StdinData{.data = "line 1\nline 2\n"}},
      {"stdin_eof", proto::StdinEof{}},
      {"stdin_ack", proto::StdinAck{.bytes = 14}},
      {"progress", proto::Progress{.collectives = 42}},
      {"progress_damaged",
       proto::ProgressDamaged{.rank = 3, .what = "set its progress counter back from 9 to 0"}},
      {"net_listen", proto::NetListen{.token = "5f2c9a0e1b7d4c38"}},
      {"net_listening", proto::NetListening{.port = 41234}},
      {"net_send", proto::NetSend{.round = 1,
                                  .address = "10.201.0.3",
                                  .port = 41234,
                                  .token = "5f2c9a0e1b7d4c38",
                                  .duration_ms = 1000,
                                  .timeout_ms = 10000}},
      {"net_sent", proto::NetSent{.round = 1, .bytes = 1250000000, .micros = 1000400}},
      {"image_pull", proto::ImagePull{.image = "registry.example:5000/team/train:24.10"}},
      {"reattach", proto::Reattach{.job_id = "6e8d4de4e238de8e", .node_rank = 1, .secret = "x"}},
      {"resumed",
       proto::Resumed{.pid = 4242, .headless_ms = 5100, .ready = {.master_port = 29500}}},
  };
  std::string session;
  for (const auto& [name, m] : messages) {
    write(dir, name, proto::encode(m));
    proto::encode(m, session);
  }
  write(dir, "session", session);
}

// store_fuzz input: a byte that cuts the rest into two clients' streams.
std::string two_clients(const std::string& a, const std::string& b) {
  const std::size_t total = a.size() + b.size();
  for (unsigned cut = 0; cut < 256; ++cut) {
    if (total * cut / 255 == a.size()) return std::string(1, static_cast<char>(cut)) + a + b;
  }
  return std::string(1, '\xff') + a + b;  // cannot cut there: all to the first
}

void store_seeds(const fs::path& dir) {
  auto frame = [](Op op) { return Writer(static_cast<uint8_t>(op)); };
  const std::vector<std::pair<std::string, std::string>> requests = {
      {"set", frame(Op::set).str("key").str("value").finish()},
      {"get", frame(Op::get).u64(0).str("key").finish()},
      {"add", frame(Op::add).str("counter").i64(5).finish()},
      {"compare_set", frame(Op::compare_set).str("key").str("").str("new").finish()},
      {"check", frame(Op::check).u32(2).str("a").str("b").finish()},
      {"wait", frame(Op::wait).u64(0).u32(1).str("a").finish()},
      {"erase", frame(Op::erase).str("key").finish()},
      {"num_keys", frame(Op::num_keys).finish()},
      {"multi_get", frame(Op::multi_get).u64(0).u32(2).str("a").str("b").finish()},
      {"multi_set", frame(Op::multi_set).u32(2).str("a").str("1").str("b").str("2").finish()},
      {"set_owned", frame(Op::set_owned).str("alive/0").str("me").finish()},
  };
  std::string session;
  for (const auto& [name, bytes] : requests) {
    write(dir, name, two_clients(bytes, ""));
    session += bytes;
  }
  write(dir, "session", two_clients(session, ""));
  // One client parks on keys that the other one sets.
  write(dir, "parked_get",
        two_clients(frame(Op::get).u64(60000).str("later").finish(),
                    frame(Op::set).str("later").str("v").finish()));
  write(dir, "parked_multi_get",
        two_clients(frame(Op::multi_get).u64(60000).u32(2).str("x").str("y").finish() +
                        frame(Op::num_keys).finish(),
                    frame(Op::multi_set).u32(2).str("x").str("1").str("y").str("2").finish()));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  const fs::path root = argv[1];
  protocol_seeds(root / "protocol_fuzz");
  store_seeds(root / "store_fuzz");
  return 0;
}
