// The control protocol between dlaunch (the head) and dlaunch-agent.
//
// It runs over the agent's stdin (head -> agent) and stdout (agent -> head):
// a pipe for local nodes, an SSH exec channel for remote ones. Every message
// is one frame:
//
//   u32 payload length (little endian) | u16 message type | u16 flags (0) | payload
//
// Payload fields are little-endian integers, and strings/bytes as u32 length +
// data. The agent speaks first with Hello, which carries kMagic and
// kProtocolVersion; the head refuses any other version before sending work.
//
//   agent -> head: Hello, Ready, Started, Output, Exited, Heartbeat, Fatal, Done,
//                  FenceUp, WorkerAbort, ProbeResult, Stacks, StdinAck, Progress,
//                  ProgressDamaged, ImagePull, Resumed
//   head -> agent: Setup, Start, Abort, Heartbeat, Shutdown, FenceDown, Probe,
//                  PauseOutput, SignalRanks, CollectStacks, StdinData, StdinEof,
//                  Reattach
//
// MPI mode (Setup.mpi): every agent is a PMIx server; a fence spanning nodes
// sends each node's blob up (FenceUp, numbered per node in call order), and
// the head answers every node with all blobs concatenated (FenceDown).
//
// Choosing the network (docs/troubleshooting.md): every agent lists its
// interfaces in Ready. Unless the address is given (or every node is on the
// head's machine), node 0 accepts connections on its reserved port from
// Setup until Start (Setup.accept_probes), and every other node is asked to
// connect to node 0's candidate addresses (Probe); it answers with one
// outcome per address (ProbeResult). The head chooses, and Start carries the
// address (Start.net_address) from which each agent finds the interface its
// workers' traffic takes.
//
// Output flow control (launcher/output/console.h): when dlaunch's console
// cannot keep up, the head sends PauseOutput{true} and the agent stops
// reading its workers' pipes (they block on a full pipe, as under the
// agent's own backpressure) while every other message keeps flowing;
// PauseOutput{false} resumes. Output already on its way still arrives, and a
// worker that exits still has its last output sent before its Exited.
//
// Locating hangs (docs/troubleshooting.md): at any time while running, the
// head may ask for a stack of every rank (CollectStacks); the agent answers
// once per request (Stacks), within the time the request gives, with what it
// got: a native stack of every thread (eu-stack or gdb, run by the agent) and,
// when asked to (the job is going down anyway), the Python traceback that
// faulthandler prints on SIGABRT.
//
// Sequence: Hello, Setup, [ImagePull, ImagePull{done}], Ready, [Probe, ProbeResult], Start,
// (Started | Output | Exited | SignalRanks | StdinData | StdinEof | StdinAck)*, [Abort], Shutdown,
// Done, then the agent exits. The agent treats EOF on its stdin as
// Abort{immediate=false} followed by Shutdown.
//
// Decoding never trusts lengths: a frame over kMaxFrameBytes, a truncated
// payload or trailing bytes throw ProtocolError. Thread safety: none needed,
// all functions are pure.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "dlaunch/error.h"
#include "dlaunch/proto/container.h"
#include "dlaunch/tunables.h"

namespace dlaunch::proto {

inline constexpr std::uint32_t kMagic = 0x4e4c4444;  // "DDLN"
// 12: boot ids and processes in Hello and Setup, Setup.container, Setup.app_sizes.
// 14: Setup.container.shm_size.
// 15: ImagePull.
// 16: Setup.check, check_scripts, count_gpus; Ready.problems, facts, topology, gpus;
//     Hello.exe.
// 17: Setup.head_grace_ms, Reattach, Resumed (a job that survives its head).
// 18: Setup.gpu_test_mb.
inline constexpr std::uint16_t kProtocolVersion = 18;
inline constexpr std::uint32_t kMaxFrameBytes = 16u << 20;
inline constexpr std::size_t kHeaderBytes = 8;
// The most of a worker's TORCHELASTIC_ERROR_FILE an agent sends in Exited.
inline constexpr std::size_t kMaxErrorFileBytes = 64u << 10;
// The most addresses one Probe asks an agent to try at once (more are
// answered "not tried").
inline constexpr std::size_t kMaxProbeAddresses = 64;

// A peer broke the protocol: a malformed, oversized or unknown frame
// (ErrorKind::kProtocol: version skew or a bug on the other side).
class ProtocolError : public Error {
 public:
  explicit ProtocolError(const std::string& message) : Error(ErrorKind::kProtocol, message) {}
};

using Env = std::vector<std::pair<std::string, std::string>>;

// Milliseconds as the protocol carries them.
constexpr std::uint32_t ms(std::chrono::milliseconds d) {
  return static_cast<std::uint32_t>(d.count());
}

struct Hello {
  static constexpr std::uint16_t kId = 1;  // on the wire: never reused
  std::uint32_t magic = kMagic;
  std::uint16_t version = kProtocolVersion;
  std::string agent_version;
  std::string hostname;
  std::int32_t pid = 0;
  // Which boot of which machine, and the agent and its parent (the sshd,
  // step or head that relays for it) as processes: a head on the same boot
  // can tell a starved agent from a gone one (StarvationWatch). Absent
  // (empty, 0) from an agent of an older protocol, which says so in
  // `version` before anything else is read.
  std::string boot_id;
  std::uint64_t start_ticks = 0;
  std::int32_t parent_pid = 0;
  std::uint64_t parent_start_ticks = 0;
  // The agent's own executable (/proc/self/exe), version 16: --check tells
  // an installed agent from the copy in the node's cache by it.
  std::string exe;
  // Only when `version` is not kProtocolVersion: the bytes after `pid`, kept
  // unread (their layout is another protocol's) and written back as they are.
  std::string foreign_tail;
};

struct WorkerSpec {
  std::int32_t rank = 0;
  std::int32_t local_rank = 0;
  std::vector<std::string> argv;
  Env env;                  // added to (and overriding) the agent's own environment
  std::string workdir;      // empty: Setup::workdir (MPMD apps may each have their own)
  bool stdin_pipe = false;  // stdin is a pipe fed by StdinData (--stdin); else /dev/null
};

struct Setup {
  static constexpr std::uint16_t kId = 2;  // on the wire: never reused
  std::string job_id;
  std::int32_t node_rank = 0;
  bool reserve_master_port = false;  // node 0: find a free port and hold it
  std::uint16_t master_port = 0;     // 0: any free port; otherwise this one
  // Node 0: listen on the reserved port until Start, accepting connections
  // and dropping them at once, so that the other nodes can test which of its
  // addresses they reach (Probe).
  bool accept_probes = false;
  // Defaults: dlaunch/tunables.h.
  std::uint32_t kill_grace_ms = ms(default_ms(tunables::kKillGrace));
  std::uint32_t heartbeat_interval_ms = ms(timing::kMaxHeartbeatInterval);
  std::uint32_t heartbeat_timeout_ms = ms(default_ms(tunables::kHeartbeatTimeout));  // 0: never
  std::uint32_t flush_ms = ms(timing::kFlushPartialLine);  // partial output lines leave after this
  std::string workdir;
  std::vector<WorkerSpec> workers;
  // Node 0 hosts the job's comm store when a secret is given.
  std::string store_secret;
  std::uint16_t store_port = 0;  // 0: any free port
  // The address node 0's store listens on: loopback when every node is on
  // the head's machine (other hosts have nothing to reach), else every one.
  std::string store_bind = "0.0.0.0";
  // MPI mode: the whole job's layout, for the PMIx namespace.
  bool mpi = false;
  std::vector<std::string> node_names;       // logical node names, node order
  std::vector<std::int32_t> ranks_per_node;  // how many ranks each node has
  // The node of every global rank, when the ranks of a node are not
  // contiguous (MPMD apps restricted to some nodes); empty: contiguous in
  // node order.
  std::vector<std::int32_t> node_of_rank;
  // Ranks of the whole job on this node's machine (its logical nodes
  // together): the agent tells MPI to yield when they outnumber its CPUs.
  std::int32_t ranks_on_host = 0;
  // Placement (docs/placement.md): --bind-to and --map-by as given (empty:
  // not given; the agent applies the defaults) and --oversubscribe. The agent
  // maps the ranks_on_host ranks of its machine on its own topology and binds
  // its own slice, from host_rank_offset (logical nodes of one machine share
  // its cores and each binds its share).
  std::string bind_to;
  std::string map_by;
  bool oversubscribe = false;
  std::int32_t host_rank_offset = 0;
  // The workers' OMP_NUM_THREADS=1 is the head's default, not the user's: a
  // bound rank gets its number of cores instead.
  bool omp_default = false;
  // --stall-timeout: how often the agent looks at its ranks' comm progress
  // counters and sends Progress when they moved; 0: it gives none.
  std::uint32_t progress_interval_ms = 0;
  // The head as a process, and its machine's boot: an agent on the same
  // boot tells a starved head from a gone one (StarvationWatch).
  std::string head_boot_id;
  std::int32_t head_pid = 0;
  std::uint64_t head_start_ticks = 0;
  // --container-image and the rest (docs/containers.md): the node's ranks
  // run in one container of this image; no image: on the host.
  ContainerSpec container;
  // MPI mode, MPMD (version 12): the ranks of each app in app order (apps
  // number their ranks in turn), for PMIx's app numbers as mpirun gives
  // them; empty: one app.
  std::vector<std::int32_t> app_sizes;
  // --check (version 16): the job stops at Ready, and no worker starts. The
  // agent says every problem it finds in Ready.problems instead of refusing
  // at the first: the working directory, each worker's program (on the host,
  // or in the node's container once it is made), each of check_scripts (the
  // script an interpreter is given, relative to workdir unless absolute);
  // and it reads what --check shows of the node: its health facts, its
  // topology and, with count_gpus, the GPUs nvidia-smi lists.
  bool check = false;
  std::vector<std::string> check_scripts;
  bool count_gpus = false;
  // --head-grace (version 17): once the workers run, an agent whose head
  // goes away (its channel closes, or falls silent past the heartbeat
  // timeout) keeps them running this long for a new head to take the job
  // over (Reattach); then it stops them as it does at once when this is 0.
  std::uint32_t head_grace_ms = 0;
  // With head_grace_ms, the job's secret on every node: what a new head's
  // agent must prove at the node's door (agent/reattach.h). Never sent on.
  std::string reattach_secret;
  // --check (version 18): with check, the GPU compute and memory test
  // (agent/health/gpu_test.h) on every GPU of the node, testing this many MiB
  // of each; 0: no GPU test (--check=quick).
  std::uint32_t gpu_test_mb = 0;
};

enum class AddressFamily : std::uint8_t { kIpv4 = 4, kIpv6 = 6 };

// One address of one of a node's network interfaces (getifaddrs).
struct Interface {
  std::string name;     // "eth0"
  std::string address;  // numeric, without a scope: "10.1.2.3", "fd00::2"
  std::uint8_t prefix_len = 0;
  AddressFamily family = AddressFamily::kIpv4;
  bool up = false;  // IFF_UP: configured up (with or without a carrier)
  bool loopback = false;
};

// A problem --check found on a node (Ready.problems): the column of --check's
// table it belongs to ("wdir", "program"; empty: none of them) and what it is.
struct Problem {
  std::string column;
  std::string message;
  bool operator==(const Problem&) const = default;
};

struct Ready {
  static constexpr std::uint16_t kId = 3;  // on the wire: never reused
  std::uint16_t master_port = 0;           // the reserved port, 0 when none
  std::uint16_t store_port = 0;            // the comm store's port, 0 when none
  // The store's Unix socket (in a folder private to the job's user), for
  // workers on node 0's machine; empty when none.
  std::string store_path;
  // How this node keeps the job's processes together: empty when in a cgroup
  // of its own, else why there is none (then a process that leaves both its
  // process group and the environment token can escape the clean-up).
  std::string no_cgroup;
  // The node's interface addresses, in the order the system lists them.
  std::vector<Interface> interfaces;
  // Setup.check only (version 16): every problem found (empty: none), the
  // node's health facts ("KEY", "VALUE": agent/health/node_health.h), its
  // topology in one line (or why it could not be read), and the GPUs
  // nvidia-smi lists (-1: not counted).
  std::vector<Problem> problems;
  std::vector<std::pair<std::string, std::string>> facts;
  std::string topology;
  std::int32_t gpus = -1;
};

struct Start {
  static constexpr std::uint16_t kId = 4;  // on the wire: never reused
  Env env;                                 // common to every worker (MASTER_ADDR, MASTER_PORT, ...)
  // The IP address MASTER_ADDR names, when dlaunch chose or knows it: the
  // agent sets its workers' GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME (and under
  // MPI, Open MPI's TCP interface lists) to its interface toward it, where
  // the user did not set them. Empty: none are set.
  std::string net_address;
};

struct Started {
  static constexpr std::uint16_t kId = 5;  // on the wire: never reused
  std::int32_t rank = 0;
  std::int32_t pid = 0;
  // Where it runs (--report-bindings): its CPUs as a list ("0-3,8") and as
  // mpirun's picture ("[BB/../..]"), empty when not bound; binding_note says
  // why not, or what else to know (oversubscribed, a synthetic topology).
  std::string cpus;
  std::string cpu_picture;
  std::string binding_note;
};

enum class Stream : std::uint8_t { kStdout = 1, kStderr = 2 };

struct Output {
  static constexpr std::uint16_t kId = 6;  // on the wire: never reused
  std::int32_t rank = 0;
  Stream stream = Stream::kStdout;
  bool partial = false;  // data does not end a line (flushed by timeout or size)
  std::string data;      // whole lines, each ending in '\n', unless partial
};

enum class ExitKind : std::uint8_t { kExited = 1, kSignaled = 2, kSpawnFailed = 3, kAborted = 4 };

struct Exited {
  static constexpr std::uint16_t kId = 7;  // on the wire: never reused
  std::int32_t rank = 0;
  std::int32_t pid = 0;
  ExitKind kind = ExitKind::kExited;
  std::int32_t code = 0;    // exit code (kExited, kSpawnFailed: 127)
  std::int32_t signal = 0;  // kSignaled
  std::uint64_t runtime_ms = 0;
  std::string message;  // why a spawn failed
  // A failed worker's TORCHELASTIC_ERROR_FILE (PyTorch's @record writes JSON
  // there), when it wrote one: its path on the node and at most
  // kMaxErrorFileBytes of it. Empty otherwise.
  std::string error_file;
  std::string error_file_data;
};

struct Abort {
  static constexpr std::uint16_t kId = 8;  // on the wire: never reused
  std::string reason;
  bool immediate = false;  // SIGKILL now instead of SIGTERM + grace
};

struct Heartbeat {
  static constexpr std::uint16_t kId = 9;
};
struct Shutdown {
  static constexpr std::uint16_t kId = 10;
};
struct Fatal {
  static constexpr std::uint16_t kId = 11;  // on the wire: never reused
  std::string message;
};
struct Done {
  static constexpr std::uint16_t kId = 12;  // on the wire: never reused
  std::uint32_t leftovers_killed = 0;       // descendants that outlived their worker
};
struct FenceUp {
  static constexpr std::uint16_t kId = 13;  // on the wire: never reused
  std::uint32_t seq = 0;
  std::string data;
};
struct FenceDown {
  static constexpr std::uint16_t kId = 14;  // on the wire: never reused
  std::uint32_t seq = 0;
  std::string data;
};
// A worker asked to abort the whole job (PMIx_Abort, i.e. MPI_Abort).
struct WorkerAbort {
  static constexpr std::uint16_t kId = 15;  // on the wire: never reused
  std::int32_t rank = 0;
  std::int32_t status = 0;
  std::string message;
};

// Connect to each of node 0's candidate addresses at `port` (all at once,
// each within timeout_ms) and say which answered.
struct Probe {
  static constexpr std::uint16_t kId = 16;  // on the wire: never reused
  std::uint16_t port = 0;
  std::uint32_t timeout_ms = 0;
  std::vector<std::string> addresses;  // numeric IP addresses
};
struct ProbeOutcome {
  std::string address;
  bool reached = false;
  std::string error;      // why not, when not reached
  std::string interface;  // this node's interface toward the address; empty: unknown
};
// One outcome per address of the Probe, in its order.
struct ProbeResult {
  static constexpr std::uint16_t kId = 17;  // on the wire: never reused
  std::vector<ProbeOutcome> outcomes;
};

// Head -> agent: stop (true) or resume (false) reading the workers' output.
struct PauseOutput {
  static constexpr std::uint16_t kId = 18;  // on the wire: never reused
  bool pause = false;
};

// Send a signal to every running rank of the node (its process group: the
// worker and its children) without stopping the job: --signal's warning
// before --timeout or on SIGTERM, and the signals dlaunch forwards (SIGUSR1,
// SIGUSR2, SIGCONT, SIGTSTP; docs/troubleshooting.md, "Signals"). The signal
// travels as its number: Linux numbers it the same on every node of one
// architecture (a job that mixes architectures whose numbers differ, such as
// Alpha or MIPS with x86, is not supported).
struct SignalRanks {
  static constexpr std::uint16_t kId = 19;  // on the wire: never reused
  std::int32_t signal = 0;
};

// The most of one rank's stack text an agent sends in Stacks (native and
// Python each); an agent with many ranks sends less per rank, so that one
// Stacks frame stays well within kMaxFrameBytes.
inline constexpr std::size_t kMaxStackBytes = 256u << 10;

// Take a stack of every running rank of this node, and answer with Stacks
// within timeout_ms (with what there is by then).
struct CollectStacks {
  static constexpr std::uint16_t kId = 20;  // on the wire: never reused
  std::uint32_t request_id = 0;
  std::uint32_t timeout_ms = 0;
  // After its native stack, send SIGABRT to each Python rank (the job is
  // being stopped): with PYTHONFAULTHANDLER=1 it prints every thread's
  // traceback on stderr, which the agent sends in RankStack::python (the
  // lines also go to the head as the rank's Output, as ever).
  bool python_abort = false;
};
struct RankStack {
  std::int32_t rank = 0;
  std::int32_t pid = 0;
  std::string native;  // the stack tool's output; empty when none
  std::string python;  // faulthandler's dump (python_abort); empty when none
  std::string error;   // why there is no (complete) native stack; empty when none
};
struct Stacks {
  static constexpr std::uint16_t kId = 21;  // on the wire: never reused
  std::uint32_t request_id = 0;
  std::string tool;              // the stack tool used ("eu-stack", "gdb"); empty: none found
  std::vector<RankStack> ranks;  // the ranks running when asked, in rank order
};

// dlaunch's stdin (--stdin), for the workers whose WorkerSpec::stdin_pipe is
// set: head -> agent, StdinData with the next bytes (every such worker of the
// node gets them all), then StdinEof once (the agent closes their pipes when
// it has written what it holds). Flow control by credit: the head has at most
// kStdinWindow bytes sent to an agent that the agent has not acknowledged;
// the agent acknowledges (StdinAck, the total so far) the bytes every such
// worker of its node has taken (written into its pipe, or dropped because the
// worker is gone), so that what it holds per worker stays within the window
// and a worker that does not read stops dlaunch reading its stdin.
inline constexpr std::size_t kStdinWindow = 1u << 20;
inline constexpr std::size_t kStdinChunk = 64u << 10;  // the most bytes in one StdinData
struct StdinData {
  static constexpr std::uint16_t kId = 22;  // on the wire: never reused
  std::string data;
};
struct StdinEof {
  static constexpr std::uint16_t kId = 23;
};
struct StdinAck {
  static constexpr std::uint16_t kId = 24;  // on the wire: never reused
  std::uint64_t bytes = 0;  // every byte of StdinData so far that every target worker has taken
};

// Agent -> head: the node's ranks completed comm calls (collectives, sends,
// receives) since the last Progress: for --stall-timeout a rank that computes
// and communicates without writing a line is not stalled. collectives: the
// node's total so far.
struct Progress {
  static constexpr std::uint16_t kId = 25;  // on the wire: never reused
  std::uint64_t collectives = 0;
};

// Agent -> head, once per rank: the rank damaged the progress memory it was
// given (agent/progress_board.h), so its comm calls count no more; what: how
// ("truncated its progress memory ..."), to follow "rank N ".
struct ProgressDamaged {
  static constexpr std::uint16_t kId = 26;  // on the wire: never reused
  std::int32_t rank = 0;
  std::string what;
};

// --check's network test between nodes (issue 33; launcher/check/health.h,
// agent/bandwidth.h), after the reach test, with no worker started:
// Head -> agent: listen for the other nodes' test streams; a stream counts
// only once it has begun with `token` (random per check, from the head).
struct NetListen {
  static constexpr std::uint16_t kId = 27;  // on the wire: never reused
  std::string token;
};
inline constexpr std::size_t kMinNetTokenBytes = 16;
// Agent -> head: the TCP port it listens at on every address; 0 and why when
// it cannot.
struct NetListening {
  static constexpr std::uint16_t kId = 28;  // on the wire: never reused
  std::uint16_t port = 0;
  std::string error;
};
// Head -> agent: stream to address:port for duration_ms (token first), then
// wait for the receiver to acknowledge all of it; give up at timeout_ms.
struct NetSend {
  static constexpr std::uint16_t kId = 29;  // on the wire: never reused
  std::uint32_t round = 0;
  std::string address;
  std::uint16_t port = 0;
  std::string token;
  std::uint32_t duration_ms = 0;
  std::uint32_t timeout_ms = 0;
};
// Agent -> head: what one NetSend moved, and in what time (from the
// connection to the acknowledgement); error: why it did not.
struct NetSent {
  static constexpr std::uint16_t kId = 30;  // on the wire: never reused
  std::uint32_t round = 0;
  std::uint64_t bytes = 0;
  std::uint64_t micros = 0;
  std::string error;
};

// Agent -> head, between Setup and Ready: the node's container image is not
// on the node (or --container-pull always) and the agent pulls it (done
// false), then the pull ended (done true; a failed pull is a Fatal instead).
// The agent heartbeats from the first on, and the head watches the node from
// then: a pull takes minutes, bounded by the agent's own limit, and its time
// is not counted against --start-timeout. The head shows it on the progress
// line.
struct ImagePull {
  static constexpr std::uint16_t kId = 31;  // on the wire: never reused
  std::string image;
  bool done = false;
};

// A job that survives its head (version 17; docs/events.md, "A job that
// survives its head"). A new head starts an agent on the node as any head
// does, and after its Hello sends Reattach instead of Setup. That agent
// finds the job's agent on its machine (the one that kept the node's ranks
// running since its head went: a Unix socket in the job's private folder of
// the node, agent/reattach.h), both prove the job's secret, and it hands its
// own channel (its stdin and stdout) over: from then on the head speaks to
// the job's agent, which says Resumed, then Started for each rank it
// started, Exited for each that had ended before the head went, then what it
// held back since (the ranks' output, their exits, fence parts), and goes on
// as before. An agent that finds no such job says Fatal.
struct Reattach {
  static constexpr std::uint16_t kId = 32;  // on the wire: never reused
  std::string job_id;
  std::int32_t node_rank = 0;
  std::string secret;  // the job's (Setup.store_secret): proved, never sent on
  // The new head as a process, as in Setup (StarvationWatch).
  std::string head_boot_id;
  std::int32_t head_pid = 0;
  std::uint64_t head_start_ticks = 0;
};
struct Resumed {
  static constexpr std::uint16_t kId = 33;  // on the wire: never reused
  // The job's agent, as Hello says it (the one the head started hands over).
  std::int32_t pid = 0;
  std::uint64_t start_ticks = 0;
  std::string boot_id;
  std::uint64_t headless_ms = 0;  // how long it had no head
  std::uint64_t held_bytes = 0;   // of the ranks' output, held for the new head
  Ready ready;                    // what it said at the job's start
};

// Every message's type on the wire is its kId, pinned (a test checks each
// one): a message added later takes the next free number, whatever its
// place in this list; a removed one's number is never given again.
using Message = std::variant<Hello, Setup, Ready, Start, Started, Output, Exited, Abort, Heartbeat,
                             Shutdown, Fatal, Done, FenceUp, FenceDown, WorkerAbort, Probe,
                             ProbeResult, PauseOutput, SignalRanks, CollectStacks, Stacks,
                             StdinData, StdinEof, StdinAck, Progress, ProgressDamaged, NetListen,
                             NetListening, NetSend, NetSent, ImagePull, Reattach, Resumed>;

// Appends one complete frame for msg to out.
void encode(const Message& msg, std::string& out);
std::string encode(const Message& msg);

// Incremental decoder: feed bytes as they arrive, pull whole messages out.
class Decoder {
 public:
  void feed(std::string_view bytes);
  // The next complete message, or nullopt when more bytes are needed.
  // Throws ProtocolError on an oversized, unknown or malformed frame; the
  // stream is unusable afterwards.
  std::optional<Message> next();
  // Bytes held that do not yet make a frame (EOF with this > 0 = truncated).
  std::size_t pending() const { return buf_.size() - pos_; }
  // When every byte fed was taken, frees the buffer (not only its bytes):
  // for a reader that goes idle, where a thousand decoders would each keep
  // the capacity of their largest read. Not after every read: a stream
  // that keeps coming reuses it.
  void release_if_empty();
  // The bytes held that are not taken yet (a frame begun, frames not asked
  // for), given up: the decoder is empty afterwards.
  std::string take_pending();

 private:
  std::string buf_;
  std::size_t pos_ = 0;
};

// Decodes exactly one frame payload (no header). Throws ProtocolError.
Message decode_payload(std::uint16_t type, std::string_view payload);

const char* message_name(const Message& msg);

// A message's type on the wire (its kId).
inline std::uint16_t message_id(const Message& msg) {
  return std::visit([](const auto& m) { return std::decay_t<decltype(m)>::kId; }, msg);
}

// Whether `id` is the wire type of one of the messages M...
template <typename... M>
constexpr bool is_one_of(std::uint16_t id) {
  return ((id == M::kId) || ...);
}

}  // namespace dlaunch::proto
