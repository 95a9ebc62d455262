#include "dlaunch/proto/protocol.h"

#include <type_traits>

#include "dlaunch/codec.h"

namespace dlaunch::proto {
namespace {

// Message type on the wire = index in the Message variant + 1. Append new
// messages at the end of the variant; never reorder.
//
// Fields go through dlaunch/codec.h (little-endian, u32-length-prefixed
// strings). Its Reader is sticky; this one throws ProtocolError at the first
// read that fails, so that a decoder never acts on a value it did not get.
using Writer = codec::Writer;

void put_env(Writer& w, const Env& e) {
  w.u32(static_cast<std::uint32_t>(e.size()));
  for (const auto& [k, v] : e) w.bytes(k).bytes(v);
}

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  std::uint8_t u8() { return checked(in_.u8()); }
  std::uint16_t u16() { return checked(in_.u16()); }
  std::uint32_t u32() { return checked(in_.u32()); }
  std::int32_t i32() { return checked(in_.i32()); }
  std::uint64_t u64() { return checked(in_.u64()); }
  bool boolean() { return checked(in_.boolean()); }
  std::string str() { return std::string(checked(in_.bytes())); }
  // A count of items that each take at least min_item_bytes: bounded by what is left.
  std::uint32_t count(std::size_t min_item_bytes) { return checked(in_.count(min_item_bytes)); }
  Env env() {
    Env e;
    auto n = count(8);
    e.reserve(n);
    for (std::uint32_t i = 0; i < n; ++i) {
      auto k = str();
      auto v = str();
      e.emplace_back(std::move(k), std::move(v));
    }
    return e;
  }
  std::string rest() { return std::string(in_.rest()); }
  void finish() {
    in_.finish();
    checked(0);
  }

 private:
  template <typename T>
  T checked(T value) {
    switch (in_.failure()) {
      case codec::Failure::kNone:
        return value;
      case codec::Failure::kTruncated:
        throw ProtocolError("truncated frame");
      case codec::Failure::kBadBool:
        throw ProtocolError("bad boolean in frame");
      case codec::Failure::kBadCount:
        throw ProtocolError("item count exceeds frame size");
      case codec::Failure::kTrailingBytes:
        throw ProtocolError("trailing bytes in frame");
    }
    throw ProtocolError("malformed frame");
  }
  codec::Reader in_;
};

void put(Writer& w, const Hello& m) {
  w.u32(m.magic);
  w.u16(m.version);
  w.bytes(m.agent_version);
  w.bytes(m.hostname);
  w.i32(m.pid);
  if (m.version != kProtocolVersion) {
    w.raw(m.foreign_tail);
    return;
  }
  w.bytes(m.boot_id);
  w.u64(m.start_ticks);
  w.i32(m.parent_pid);
  w.u64(m.parent_start_ticks);
  w.bytes(m.exe);
}
void put(Writer& w, const Setup& m) {
  w.bytes(m.job_id);
  w.i32(m.node_rank);
  w.boolean(m.reserve_master_port);
  w.u16(m.master_port);
  w.boolean(m.accept_probes);
  w.u32(m.kill_grace_ms);
  w.u32(m.heartbeat_interval_ms);
  w.u32(m.heartbeat_timeout_ms);
  w.u32(m.flush_ms);
  w.bytes(m.workdir);
  w.u32(static_cast<std::uint32_t>(m.workers.size()));
  for (const auto& ws : m.workers) {
    w.i32(ws.rank);
    w.i32(ws.local_rank);
    w.u32(static_cast<std::uint32_t>(ws.argv.size()));
    for (const auto& a : ws.argv) w.bytes(a);
    put_env(w, ws.env);
    w.bytes(ws.workdir);
    w.boolean(ws.stdin_pipe);
  }
  w.bytes(m.store_secret);
  w.u16(m.store_port);
  w.bytes(m.store_bind);
  w.boolean(m.mpi);
  w.u32(static_cast<std::uint32_t>(m.node_names.size()));
  for (const auto& n : m.node_names) w.bytes(n);
  w.u32(static_cast<std::uint32_t>(m.ranks_per_node.size()));
  for (auto n : m.ranks_per_node) w.i32(n);
  w.u32(static_cast<std::uint32_t>(m.node_of_rank.size()));
  for (auto n : m.node_of_rank) w.i32(n);
  w.i32(m.ranks_on_host);
  w.bytes(m.bind_to).bytes(m.map_by);
  w.boolean(m.oversubscribe);
  w.i32(m.host_rank_offset);
  w.boolean(m.omp_default);
  w.u32(m.progress_interval_ms);
  w.bytes(m.head_boot_id);
  w.i32(m.head_pid);
  w.u64(m.head_start_ticks);
  const ContainerSpec& c = m.container;
  w.bytes(c.image).bytes(c.runtime);
  w.u32(static_cast<std::uint32_t>(c.mounts.size()));
  for (const auto& s : c.mounts) w.bytes(s);
  w.bytes(c.workdir);
  w.u32(static_cast<std::uint32_t>(c.env.size()));
  for (const auto& s : c.env) w.bytes(s);
  w.boolean(c.mount_home);
  w.boolean(c.entrypoint);
  w.bytes(c.pull);
  w.bytes(c.shm_size);
  w.u32(static_cast<std::uint32_t>(m.app_sizes.size()));
  for (auto n : m.app_sizes) w.i32(n);
  w.boolean(m.check);
  w.u32(static_cast<std::uint32_t>(m.check_scripts.size()));
  for (const auto& s : m.check_scripts) w.bytes(s);
  w.boolean(m.count_gpus);
  w.u32(m.head_grace_ms);
  w.bytes(m.reattach_secret);
  w.u32(m.gpu_test_mb);
}
void put(Writer& w, const Ready& m) {
  w.u16(m.master_port);
  w.u16(m.store_port);
  w.bytes(m.store_path);
  w.bytes(m.no_cgroup);
  w.u32(static_cast<std::uint32_t>(m.interfaces.size()));
  for (const auto& i : m.interfaces) {
    w.bytes(i.name).bytes(i.address);
    w.u8(i.prefix_len);
    w.u8(static_cast<std::uint8_t>(i.family));
    w.boolean(i.up);
    w.boolean(i.loopback);
  }
  w.u32(static_cast<std::uint32_t>(m.problems.size()));
  for (const auto& p : m.problems) w.bytes(p.column).bytes(p.message);
  w.u32(static_cast<std::uint32_t>(m.facts.size()));
  for (const auto& [k, v] : m.facts) w.bytes(k).bytes(v);
  w.bytes(m.topology);
  w.i32(m.gpus);
}
void put(Writer& w, const Start& m) {
  put_env(w, m.env);
  w.bytes(m.net_address);
}
void put(Writer& w, const Started& m) {
  w.i32(m.rank);
  w.i32(m.pid);
  w.bytes(m.cpus).bytes(m.cpu_picture).bytes(m.binding_note);
}
void put(Writer& w, const Output& m) {
  w.i32(m.rank);
  w.u8(static_cast<std::uint8_t>(m.stream));
  w.boolean(m.partial);
  w.bytes(m.data);
}
void put(Writer& w, const Exited& m) {
  w.i32(m.rank);
  w.i32(m.pid);
  w.u8(static_cast<std::uint8_t>(m.kind));
  w.i32(m.code);
  w.i32(m.signal);
  w.u64(m.runtime_ms);
  w.bytes(m.message);
  w.bytes(m.error_file);
  w.bytes(m.error_file_data);
}
void put(Writer& w, const Abort& m) {
  w.bytes(m.reason);
  w.boolean(m.immediate);
}
void put(Writer&, const Heartbeat&) {}
void put(Writer&, const Shutdown&) {}
void put(Writer& w, const Fatal& m) { w.bytes(m.message); }
void put(Writer& w, const Done& m) { w.u32(m.leftovers_killed); }
void put(Writer& w, const FenceUp& m) {
  w.u32(m.seq);
  w.bytes(m.data);
}
void put(Writer& w, const FenceDown& m) {
  w.u32(m.seq);
  w.bytes(m.data);
}
void put(Writer& w, const WorkerAbort& m) {
  w.i32(m.rank);
  w.i32(m.status);
  w.bytes(m.message);
}
void put(Writer& w, const Probe& m) {
  w.u16(m.port);
  w.u32(m.timeout_ms);
  w.u32(static_cast<std::uint32_t>(m.addresses.size()));
  for (const auto& a : m.addresses) w.bytes(a);
}
void put(Writer& w, const ProbeResult& m) {
  w.u32(static_cast<std::uint32_t>(m.outcomes.size()));
  for (const auto& o : m.outcomes) {
    w.bytes(o.address);
    w.boolean(o.reached);
    w.bytes(o.error).bytes(o.interface);
  }
}
void put(Writer& w, const PauseOutput& m) { w.boolean(m.pause); }
void put(Writer& w, const StdinData& m) { w.bytes(m.data); }
void put(Writer& /*w*/, const StdinEof& /*m*/) {}
void put(Writer& w, const StdinAck& m) { w.u64(m.bytes); }
void put(Writer& w, const Progress& m) { w.u64(m.collectives); }
void put(Writer& w, const ProgressDamaged& m) {
  w.i32(m.rank);
  w.bytes(m.what);
}
void put(Writer& w, const SignalRanks& m) { w.i32(m.signal); }
void put(Writer& w, const ImagePull& m) {
  w.bytes(m.image);
  w.boolean(m.done);
}
void put(Writer& w, const Reattach& m) {
  w.bytes(m.job_id);
  w.i32(m.node_rank);
  w.bytes(m.secret);
  w.bytes(m.head_boot_id);
  w.i32(m.head_pid);
  w.u64(m.head_start_ticks);
}
void put(Writer& w, const Resumed& m) {
  w.i32(m.pid);
  w.u64(m.start_ticks);
  w.bytes(m.boot_id);
  w.u64(m.headless_ms);
  w.u64(m.held_bytes);
  put(w, m.ready);
}
void put(Writer& w, const NetListen& m) { w.bytes(m.token); }
void put(Writer& w, const NetListening& m) {
  w.u16(m.port);
  w.bytes(m.error);
}
void put(Writer& w, const NetSend& m) {
  w.u32(m.round);
  w.bytes(m.address);
  w.u16(m.port);
  w.bytes(m.token);
  w.u32(m.duration_ms);
  w.u32(m.timeout_ms);
}
void put(Writer& w, const NetSent& m) {
  w.u32(m.round);
  w.u64(m.bytes);
  w.u64(m.micros);
  w.bytes(m.error);
}
void put(Writer& w, const CollectStacks& m) {
  w.u32(m.request_id);
  w.u32(m.timeout_ms);
  w.boolean(m.python_abort);
}
void put(Writer& w, const Stacks& m) {
  w.u32(m.request_id);
  w.bytes(m.tool);
  w.u32(static_cast<std::uint32_t>(m.ranks.size()));
  for (const auto& s : m.ranks) {
    w.i32(s.rank);
    w.i32(s.pid);
    w.bytes(s.native).bytes(s.python).bytes(s.error);
  }
}

void get(Reader& r, Hello& m) {
  m.magic = r.u32();
  if (m.magic != kMagic) throw ProtocolError("not a dlaunch agent (bad magic in Hello)");
  m.version = r.u16();
  m.agent_version = r.str();
  m.hostname = r.str();
  m.pid = r.i32();
  // An agent of another protocol: the head reads its version and replaces
  // it, so it must read that far whatever follows, and keeps the rest as it
  // came (one encoding per message, also for a foreign Hello).
  if (m.version != kProtocolVersion) {
    m.foreign_tail = r.rest();
    return;
  }
  m.boot_id = r.str();
  m.start_ticks = r.u64();
  m.parent_pid = r.i32();
  m.parent_start_ticks = r.u64();
  m.exe = r.str();
}
void get(Reader& r, Setup& m) {
  m.job_id = r.str();
  m.node_rank = r.i32();
  m.reserve_master_port = r.boolean();
  m.master_port = r.u16();
  m.accept_probes = r.boolean();
  m.kill_grace_ms = r.u32();
  m.heartbeat_interval_ms = r.u32();
  m.heartbeat_timeout_ms = r.u32();
  m.flush_ms = r.u32();
  m.workdir = r.str();
  auto n = r.count(16);
  m.workers.resize(n);
  for (auto& ws : m.workers) {
    ws.rank = r.i32();
    ws.local_rank = r.i32();
    auto argc = r.count(4);
    ws.argv.reserve(argc);
    for (std::uint32_t i = 0; i < argc; ++i) ws.argv.push_back(r.str());
    ws.env = r.env();
    ws.workdir = r.str();
    ws.stdin_pipe = r.boolean();
  }
  m.store_secret = r.str();
  m.store_port = r.u16();
  m.store_bind = r.str();
  m.mpi = r.boolean();
  auto nn = r.count(4);
  m.node_names.reserve(nn);
  for (std::uint32_t i = 0; i < nn; ++i) m.node_names.push_back(r.str());
  auto nr = r.count(4);
  m.ranks_per_node.reserve(nr);
  for (std::uint32_t i = 0; i < nr; ++i) m.ranks_per_node.push_back(r.i32());
  auto nor = r.count(4);
  m.node_of_rank.reserve(nor);
  for (std::uint32_t i = 0; i < nor; ++i) m.node_of_rank.push_back(r.i32());
  m.ranks_on_host = r.i32();
  m.bind_to = r.str();
  m.map_by = r.str();
  m.oversubscribe = r.boolean();
  m.host_rank_offset = r.i32();
  m.omp_default = r.boolean();
  m.progress_interval_ms = r.u32();
  m.head_boot_id = r.str();
  m.head_pid = r.i32();
  m.head_start_ticks = r.u64();
  ContainerSpec& c = m.container;
  c.image = r.str();
  c.runtime = r.str();
  auto nm = r.count(4);
  c.mounts.reserve(nm);
  for (std::uint32_t i = 0; i < nm; ++i) c.mounts.push_back(r.str());
  c.workdir = r.str();
  auto ne = r.count(4);
  c.env.reserve(ne);
  for (std::uint32_t i = 0; i < ne; ++i) c.env.push_back(r.str());
  c.mount_home = r.boolean();
  c.entrypoint = r.boolean();
  c.pull = r.str();
  c.shm_size = r.str();
  auto na = r.count(4);
  m.app_sizes.reserve(na);
  for (std::uint32_t i = 0; i < na; ++i) m.app_sizes.push_back(r.i32());
  m.check = r.boolean();
  auto ns = r.count(4);
  m.check_scripts.reserve(ns);
  for (std::uint32_t i = 0; i < ns; ++i) m.check_scripts.push_back(r.str());
  m.count_gpus = r.boolean();
  m.head_grace_ms = r.u32();
  m.reattach_secret = r.str();
  m.gpu_test_mb = r.u32();
}
void get(Reader& r, Ready& m) {
  m.master_port = r.u16();
  m.store_port = r.u16();
  m.store_path = r.str();
  m.no_cgroup = r.str();
  const auto n = r.count(12);
  m.interfaces.resize(n);
  for (auto& i : m.interfaces) {
    i.name = r.str();
    i.address = r.str();
    i.prefix_len = r.u8();
    const auto family = r.u8();
    if (family != 4 && family != 6) throw ProtocolError("bad address family in Ready");
    i.family = static_cast<AddressFamily>(family);
    i.up = r.boolean();
    i.loopback = r.boolean();
  }
  const auto np = r.count(8);
  m.problems.resize(np);
  for (auto& p : m.problems) {
    p.column = r.str();
    p.message = r.str();
  }
  const auto nf = r.count(8);
  m.facts.reserve(nf);
  for (std::uint32_t i = 0; i < nf; ++i) {
    std::string k = r.str();
    m.facts.emplace_back(std::move(k), r.str());
  }
  m.topology = r.str();
  m.gpus = r.i32();
}
void get(Reader& r, Start& m) {
  m.env = r.env();
  m.net_address = r.str();
}
void get(Reader& r, Started& m) {
  m.rank = r.i32();
  m.pid = r.i32();
  m.cpus = r.str();
  m.cpu_picture = r.str();
  m.binding_note = r.str();
}
void get(Reader& r, Output& m) {
  m.rank = r.i32();
  auto s = r.u8();
  if (s != 1 && s != 2) throw ProtocolError("bad stream in Output");
  m.stream = static_cast<Stream>(s);
  m.partial = r.boolean();
  m.data = r.str();
}
void get(Reader& r, Exited& m) {
  m.rank = r.i32();
  m.pid = r.i32();
  auto k = r.u8();
  if (k < 1 || k > 4) throw ProtocolError("bad exit kind in Exited");
  m.kind = static_cast<ExitKind>(k);
  m.code = r.i32();
  m.signal = r.i32();
  m.runtime_ms = r.u64();
  m.message = r.str();
  m.error_file = r.str();
  m.error_file_data = r.str();
}
void get(Reader& r, Abort& m) {
  m.reason = r.str();
  m.immediate = r.boolean();
}
void get(Reader&, Heartbeat&) {}
void get(Reader&, Shutdown&) {}
void get(Reader& r, Fatal& m) { m.message = r.str(); }
void get(Reader& r, Done& m) { m.leftovers_killed = r.u32(); }
void get(Reader& r, FenceUp& m) {
  m.seq = r.u32();
  m.data = r.str();
}
void get(Reader& r, FenceDown& m) {
  m.seq = r.u32();
  m.data = r.str();
}
void get(Reader& r, WorkerAbort& m) {
  m.rank = r.i32();
  m.status = r.i32();
  m.message = r.str();
}
void get(Reader& r, Probe& m) {
  m.port = r.u16();
  m.timeout_ms = r.u32();
  const auto n = r.count(4);
  m.addresses.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) m.addresses.push_back(r.str());
}
void get(Reader& r, ProbeResult& m) {
  const auto n = r.count(13);
  m.outcomes.resize(n);
  for (auto& o : m.outcomes) {
    o.address = r.str();
    o.reached = r.boolean();
    o.error = r.str();
    o.interface = r.str();
  }
}
void get(Reader& r, PauseOutput& m) { m.pause = r.boolean(); }
void get(Reader& r, StdinData& m) { m.data = r.str(); }
void get(Reader& /*r*/, StdinEof& /*m*/) {}
void get(Reader& r, StdinAck& m) { m.bytes = r.u64(); }
void get(Reader& r, Progress& m) { m.collectives = r.u64(); }
void get(Reader& r, ProgressDamaged& m) {
  m.rank = r.i32();
  m.what = r.str();
}
void get(Reader& r, NetListen& m) { m.token = r.str(); }
void get(Reader& r, ImagePull& m) {
  m.image = r.str();
  m.done = r.boolean();
}
void get(Reader& r, Reattach& m) {
  m.job_id = r.str();
  m.node_rank = r.i32();
  m.secret = r.str();
  m.head_boot_id = r.str();
  m.head_pid = r.i32();
  m.head_start_ticks = r.u64();
}
void get(Reader& r, Resumed& m) {
  m.pid = r.i32();
  m.start_ticks = r.u64();
  m.boot_id = r.str();
  m.headless_ms = r.u64();
  m.held_bytes = r.u64();
  get(r, m.ready);
}
void get(Reader& r, NetListening& m) {
  m.port = r.u16();
  m.error = r.str();
}
void get(Reader& r, NetSend& m) {
  m.round = r.u32();
  m.address = r.str();
  m.port = r.u16();
  m.token = r.str();
  m.duration_ms = r.u32();
  m.timeout_ms = r.u32();
}
void get(Reader& r, NetSent& m) {
  m.round = r.u32();
  m.bytes = r.u64();
  m.micros = r.u64();
  m.error = r.str();
}

void get(Reader& r, SignalRanks& m) {
  m.signal = r.i32();
  if (m.signal <= 0 || m.signal >= 65) throw ProtocolError("bad signal number in SignalRanks");
}

void get(Reader& r, CollectStacks& m) {
  m.request_id = r.u32();
  m.timeout_ms = r.u32();
  m.python_abort = r.boolean();
}
void get(Reader& r, Stacks& m) {
  m.request_id = r.u32();
  m.tool = r.str();
  const auto n = r.count(20);
  m.ranks.resize(n);
  for (auto& s : m.ranks) {
    s.rank = r.i32();
    s.pid = r.i32();
    s.native = r.str();
    s.python = r.str();
    s.error = r.str();
  }
}

template <std::size_t I = 0>
Message decode_by_id(std::uint16_t id, Reader& r) {
  if constexpr (I < std::variant_size_v<Message>) {
    using M = std::variant_alternative_t<I, Message>;
    if (id == M::kId) {
      M m;
      get(r, m);
      r.finish();
      return m;
    }
    return decode_by_id<I + 1>(id, r);
  } else {
    throw ProtocolError("unknown message type " + std::to_string(id));
  }
}

template <std::size_t... I>
constexpr bool ids_unique(std::index_sequence<I...>) {
  constexpr std::uint16_t ids[] = {std::variant_alternative_t<I, Message>::kId...};
  for (std::size_t a = 0; a < sizeof...(I); ++a) {
    if (ids[a] == 0) return false;
    for (std::size_t b = a + 1; b < sizeof...(I); ++b) {
      if (ids[a] == ids[b]) return false;
    }
  }
  return true;
}
static_assert(ids_unique(std::make_index_sequence<std::variant_size_v<Message>>{}),
              "two messages share a wire id (or one has 0)");

}  // namespace

void encode(const Message& msg, std::string& out) {
  const std::size_t start = out.size();
  Writer w(out);
  w.u32(0);  // the payload's length, filled in below
  w.u16(message_id(msg));
  w.u16(0);
  std::visit([&](const auto& m) { put(w, m); }, msg);
  const std::size_t len = out.size() - start - kHeaderBytes;
  if (len > kMaxFrameBytes) {
    out.resize(start);
    throw ProtocolError("message too large for one frame: " + std::to_string(len) + " bytes");
  }
  w.u32_at(start, static_cast<std::uint32_t>(len));
}

std::string encode(const Message& msg) {
  std::string out;
  encode(msg, out);
  return out;
}

Message decode_payload(std::uint16_t type, std::string_view payload) {
  Reader r(payload);
  return decode_by_id(type, r);
}

void Decoder::feed(std::string_view bytes) {
  if (pos_ > 0 && pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  } else if (pos_ > (1u << 20) && pos_ * 2 > buf_.size()) {
    buf_.erase(0, pos_);  // keep the buffer from growing without bound
    pos_ = 0;
  }
  buf_.append(bytes);
}

void Decoder::release_if_empty() {
  if (pending() != 0) return;
  std::string().swap(buf_);
  pos_ = 0;
}

std::string Decoder::take_pending() {
  std::string out = buf_.substr(pos_);
  std::string().swap(buf_);
  pos_ = 0;
  return out;
}

std::optional<Message> Decoder::next() {
  if (pending() < kHeaderBytes) return std::nullopt;
  codec::Reader h(std::string_view(buf_).substr(pos_, kHeaderBytes));  // enough bytes: no failure
  const std::uint32_t len = h.u32();
  const std::uint16_t type = h.u16();
  const std::uint16_t flags = h.u16();
  if (len > kMaxFrameBytes) {
    throw ProtocolError("frame of " + std::to_string(len) + " bytes exceeds the limit of " +
                        std::to_string(kMaxFrameBytes));
  }
  if (flags != 0) throw ProtocolError("unknown frame flags");
  if (pending() < kHeaderBytes + len) return std::nullopt;
  auto payload = std::string_view(buf_).substr(pos_ + kHeaderBytes, len);
  Message m = decode_payload(type, payload);
  pos_ += kHeaderBytes + len;
  return m;
}

const char* message_name(const Message& msg) {
  static constexpr const char* kNames[] = {
      "Hello",       "Setup",           "Ready",       "Start",        "Started",     "Output",
      "Exited",      "Abort",           "Heartbeat",   "Shutdown",     "Fatal",       "Done",
      "FenceUp",     "FenceDown",       "WorkerAbort", "Probe",        "ProbeResult", "PauseOutput",
      "SignalRanks", "CollectStacks",   "Stacks",      "StdinData",    "StdinEof",    "StdinAck",
      "Progress",    "ProgressDamaged", "NetListen",   "NetListening", "NetSend",     "NetSent",
      "ImagePull",   "Reattach",        "Resumed"};
  static_assert(std::size(kNames) == std::variant_size_v<Message>);
  return kNames[msg.index()];
}

}  // namespace dlaunch::proto
