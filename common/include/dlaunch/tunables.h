// Every number that decides how long dlaunch waits, or how much it does at
// once, in one place (as NCCL's NCCL_PARAM does).
//
// Tunables are the ones a user sets: each has its command-line option, the
// environment variable that carries it to the workers (if any), its default
// and its help text. The table feeds the options (launcher/cli/options.cpp),
// the controller's and the protocol's defaults, `dlaunch --help`, the man page
// and docs/tunables.md (`dlaunch --help-tunables` prints that page; a test
// keeps the two equal).
//
// Timing constants below them are fixed: each says what it bounds.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace dlaunch {

struct Tunable {
  const char* option;  // the command-line option, e.g. "--kill-grace"
  const char* env;     // environment variable set for the workers, or nullptr
  double value;        // the default, in `unit`
  const char* unit;    // "s" (seconds), or "" for a count
  const char* help;    // one sentence for --help
};

namespace tunables {

inline constexpr Tunable kKillGrace{"--kill-grace", nullptr, 5.0, "s",
                                    "seconds between SIGTERM and SIGKILL when the job is stopped"};
inline constexpr Tunable kHeartbeatTimeout{
    "--heartbeat-timeout", nullptr, 30.0, "s",
    "seconds of silence after which a node counts as lost (0: never)"};
inline constexpr Tunable kStartTimeout{
    "--start-timeout", nullptr, 30.0, "s",
    "seconds for each agent to become ready, counted from its node's turn to connect (the SSH "
    "concurrency limit holds the last of many nodes back) plus the time its image pull took"};
inline constexpr Tunable kTimeout{"--timeout", nullptr, 0.0, "s",
                                  "stop the job if it runs longer than this many seconds, counted "
                                  "from dlaunch's start (exit 124, report names the ranks still "
                                  "running, or the nodes not ready, and groups their stacks); 0: "
                                  "no limit"};
inline constexpr Tunable kMaxRestarts{
    "--max-restarts", "TORCHELASTIC_MAX_RESTARTS", 0.0, "",
    "after a rank or node fails, stop everything and start the whole job again, up to N times "
    "(TORCHELASTIC_RESTART_COUNT / DLAUNCH_RESTART_COUNT count up)"};
// comm's own default when the variable is unset (comm/process_group.h
// kDefaultCollectiveTimeout); dlaunch leaves the variable unset unless the
// option is given.
inline constexpr Tunable kCollectiveTimeout{
    "--collective-timeout", "DLAUNCH_COLLECTIVE_TIMEOUT", 600.0, "s",
    "seconds one comm collective may wait before the NCCL watchdog aborts it and the rank "
    "fails (0: never)"};
inline constexpr Tunable kSshConcurrency{
    "--ssh-concurrency", nullptr, 0.0, "",
    "SSH connections in progress at once (connect to exec); 0: adapt to how fast the hosts "
    "answer, from 64 up to 1024, halved when they time out or drop connections"};
inline constexpr Tunable kConnectTimeout{
    "--connect-timeout", nullptr, 10.0, "s",
    "seconds to connect, handshake and authenticate, per host"};
inline constexpr Tunable kStallTimeout{
    "--stall-timeout", nullptr, 0.0, "s",
    "when no rank has written an output line or completed a comm call for this many seconds, "
    "collect every rank's stack and report the stall (--stall-action); 0: never"};
inline constexpr Tunable kStackTimeout{
    "--stack-timeout", nullptr, 10.0, "s",
    "seconds the agents have to send every rank's stack (at --timeout, a stall, SIGQUIT) before "
    "dlaunch goes on with what came; 0: collect no stacks"};

inline constexpr std::array kAll = {
    &kKillGrace,         &kHeartbeatTimeout, &kStartTimeout,   &kTimeout,      &kMaxRestarts,
    &kCollectiveTimeout, &kSshConcurrency,   &kConnectTimeout, &kStallTimeout, &kStackTimeout};

}  // namespace tunables

// A tunable's default in milliseconds (unit "s").
constexpr std::chrono::milliseconds default_ms(const Tunable& t) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(t.value * 1000.0));
}

namespace timing {

using std::chrono::milliseconds;

// Once every rank was told to stop (SIGTERM, then SIGKILL after the kill
// grace), the head waits the grace plus this for the agents' reports, then
// kills the agents.
inline constexpr milliseconds kReportMargin{5000};
// After SIGKILL ("kill at once"): how long the agents' last reports may take
// before the head cuts their channels.
inline constexpr milliseconds kAfterKill{1000};
// A deadline the head keeps for its agents (their start, their exit) that
// passes while every agent it waits for is a local one
// still working (runnable, or it used CPU since the head last looked) is
// the machine's saturation, not a stuck agent (1024 launchers on two
// cores): the head looks again this often, for at most kSaturatedWaits
// times the deadline's own length.
inline constexpr milliseconds kSaturatedLook{2000};
inline constexpr int kSaturatedWaits = 10;
// Heartbeats go out every third of the silence timeout, at most this often.
inline constexpr milliseconds kMaxHeartbeatInterval{5000};
// An agent without its head ends whatever still counts as running after the
// kill grace plus this.
inline constexpr milliseconds kOrphanMargin{5000};
// An agent without its head (--head-grace) holds this much of its ranks'
// output for a new head; past it the ranks block on their pipes.
inline constexpr std::size_t kHeldOutput = std::size_t{64} << 20;
// A held partial line of a worker's output leaves after this much quiet.
inline constexpr milliseconds kFlushPartialLine{100};
// ... but a runnable worker's (preempted mid-line) waits this many more periods.
inline constexpr int kStarvedHolds = 10;
// How often the agent looks whether the leftovers it signalled are gone.
inline constexpr milliseconds kLeftoverPoll{20};
// The PMIx server's finalize may hang on a client that died mid-call: give up
// after this.
inline constexpr milliseconds kPmixFinalize{5000};
// The guard's last rounds of SIGKILL when its agent died, this far apart.
inline constexpr milliseconds kGuardKillRound{50};
inline constexpr int kGuardKillRounds = 5;
// A polite SSH channel close waits this long for the peer's close.
inline constexpr milliseconds kSshCloseWait{2000};
// The removal of a node's container at the end of the job (podman rm -f):
// the agent waits this long for it, and the head's wait for the agents to
// exit is this much longer on a job with containers (a large image on a
// slow storage driver takes many seconds to remove).
inline constexpr milliseconds kContainerRemoval{30000};
// How often an SSH link asks libssh2 whether a keepalive is due.
inline constexpr milliseconds kSshKeepalivePoll{1000};
// Each other node's test of node 0's addresses at start: how long one
// connect may take (a SYN and a retransmission; refused and unreachable
// answer at once).
inline constexpr milliseconds kProbeConnect{2000};
// File times come from a coarse clock: an error file this much older than
// its worker still counts as written by it.
inline constexpr milliseconds kErrorFileSlack{1000};

}  // namespace timing

// What dlaunch accepts from its input, checked before anything proportional
// to it is allocated or started (a typo of a few zeros must not eat the head).
namespace limits {

// Hostfiles and env files: people write them, scripts generate them for a
// few thousand hosts at most.
inline constexpr std::size_t kMaxInputFileBytes = std::size_t{64} << 20;
// Ranks of one job, and of one node (a machine with more hardware threads
// than this has yet to be seen).
inline constexpr long long kMaxRanksPerJob = 1 << 20;
inline constexpr long long kMaxRanksPerNode = 4096;
// Nodes of one job (each is an agent and a connection of the head).
inline constexpr long long kMaxNodesPerJob = 65536;
// One "NAME=VALUE" string or argument: Linux's MAX_ARG_STRLEN (32 pages);
// execve refuses a longer one with E2BIG.
inline constexpr std::size_t kMaxArgStringBytes = std::size_t{128} << 10;
// What one host's `env:` may add up to in a hostfile (aliases can multiply a
// small file into a huge one).
inline constexpr std::size_t kMaxHostEnvBytes = std::size_t{1} << 20;

// OpenSSH client configuration files (launcher/ssh_config/ssh_config.h),
// over all the files of one load: a real config is a few hundred short lines
// in a few files.
inline constexpr std::size_t kMaxSshConfigLineBytes = std::size_t{16} << 10;
inline constexpr std::size_t kMaxSshConfigLines = 200000;
inline constexpr std::size_t kMaxSshConfigBytes = std::size_t{64} << 20;
inline constexpr std::size_t kMaxSshConfigFiles = 512;  // the top files and every included one
}  // namespace limits

}  // namespace dlaunch
