// Hostfiles: the list of nodes a job runs on, read from YAML, from the plain
// `host slots=N` format of mpirun and DeepSpeed, or from an inline `-H a:4,b:2`.
//
// Contract: every parser either returns a fully validated Hostfile or throws
// InputError naming the source, line, column, field and a hint. Nothing is
// guessed: a named file that does not exist is an error, never a local run.
// All functions are pure (no global state) and safe to call from any thread.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dlaunch/error.h"

namespace dlaunch {

// A place in user input. line/column are 1-based; 0 means "not known".
struct SourcePos {
  std::string source;  // file path, or "-H", "--include", ...
  int line = 0;
  int column = 0;
};

// Bad user input (ErrorKind::kInput: dlaunch exits 2, nothing started).
// what() reads
//   "<source>:<line>:<col>: <field>: <message> (hint: <hint>)"
// with the parts that are unknown left out.
class InputError : public Error {
 public:
  InputError(SourcePos pos, std::string field, std::string message, std::string hint = {});

  const SourcePos& pos() const { return pos_; }
  const std::string& field() const { return field_; }
  const std::string& message() const { return message_; }
  const std::string& hint() const { return hint_; }

 private:
  SourcePos pos_;
  std::string field_;
  std::string message_;
  std::string hint_;
};

// kSlurm: the agent is a Slurm job step (`srun`), see launcher/transport/slurm_transport.h.
// kSge, kLsf, kFlux: started through that scheduler's own remote start
// (`qrsh -inherit`, `blaunch`, `flux run`), see launcher/transport/scheduler_transport.h.
enum class Transport { kLocal, kSsh, kSlurm, kSge, kLsf, kFlux };

// "local", "ssh", "slurm", "sge", "lsf", "flux": the hostfile's `transport:` value.
const char* transport_name(Transport t);

using EnvList = std::vector<std::pair<std::string, std::string>>;  // ordered NAME=VALUE

// How an SSH node is reached: dlaunch's own libssh2 client, or the system's
// OpenSSH client (`ssh`), for what libssh2 cannot do.
enum class SshClient { kLibssh2, kOpenssh };

// One health threshold the hostfile sets (`health: {NAME: VALUE}` under
// `defaults:` or a host): checked against the names by --check's judge
// (check/health.h), which knows them; kept with its place for that error.
struct HealthSetting {
  std::string name;
  std::string value;           // as written
  SourcePos pos;               // of the name
  bool from_defaults = false;  // under `defaults:` (the same for every node)
};

struct HostEntry {
  std::string name;                       // unique label of the node: `name:` if given, else `host`
  std::string host;                       // what to connect to (a DNS name or an address)
  int slots = 1;                          // ranks on this node (> 0)
  std::string user;                       // empty: the current user
  int port = 22;                          // SSH port
  bool port_given = false;                // port set by the hostfile (beats ssh_config's Port)
  std::string address;                    // how other nodes reach this one; empty: same as host
  std::vector<int> gpus;                  // device ids for CUDA_VISIBLE_DEVICES; empty: not set
  EnvList env;                            // per-host environment, in file order
  Transport transport = Transport::kSsh;  // resolved (never "auto")
  std::string agent;                      // path of dlaunch-agent on that node; empty: default
  std::string identity;                   // SSH private key file for this host; empty: none
  // The image this node's ranks run in (hostfile `container:`; beats
  // --container-image); empty: --container-image's, if any (docs/containers.md).
  std::string container;
  // The node's health thresholds (hostfile `health:`): `defaults:`'s first,
  // then its own, so that a later one of a name wins (docs/health.md).
  std::vector<HealthSetting> health;
  SshClient ssh_client = SshClient::kLibssh2;  // hostfile `ssh:` / --ssh
  SourcePos pos;                               // where the entry was defined

  // Whether this node is the head's own machine, its agent a child of
  // dlaunch (transport local): the one answer every part asks (placement,
  // the job's network, the agents' setup), not the transport.
  bool on_head_machine() const { return transport == Transport::kLocal; }
};

struct Hostfile {
  std::string source;  // path, or "-H" for inline hosts
  std::vector<HostEntry> hosts;
  EnvList env;  // top-level `env:`
};

// The contents of a file the user named (`field`: "hostfile", "--env-file"):
// a regular file or a pipe (`-H <(make-hosts)`), at most
// limits::kMaxInputFileBytes. Anything else (a directory, /dev/zero, a
// socket), a missing file, a loop of symbolic links or a larger file throws
// InputError naming the path and the reason, before reading more than the
// limit.
std::string read_input_file(const std::string& path, const std::string& field);

// True for "localhost", "localhost.localdomain", any 127.x.y.z and "::1".
bool is_local_host(std::string_view host);

// Reads the file and detects its format (see looks_like_plain). A missing or
// unreadable file throws InputError naming it.
Hostfile parse_hostfile_file(const std::string& path);

// True when every non-blank line, comments stripped, has the plain form
// `[user@]host [slots=N] [max_slots=N]`. An empty text is not plain.
bool looks_like_plain(std::string_view text);

// True when the first line that is not blank or a comment is YAML: a
// document marker or directive, a block sequence (`- `), a flow collection,
// or a mapping key (`hosts:`). A file that is not YAML is read as the plain
// format and gets the plain format's errors.
bool looks_like_yaml(std::string_view text);

Hostfile parse_yaml_hostfile(std::string_view text, const std::string& source);
Hostfile parse_plain_hostfile(std::string_view text, const std::string& source);
// "a:4,b:2,[::1]:2": host[:slots], slots default to 1 (as mpirun's -H).
Hostfile parse_inline_hosts(std::string_view spec);

// Decides what `-H VALUE` means: an existing file, a missing file (error), or
// an inline host list. VALUE is a file when it exists, or when it contains '/'
// or ends in .yaml, .yml, .txt, .hosts or .hostfile (then missing is an error).
Hostfile parse_hosts_argument(const std::string& value);

// DeepSpeed-style node selection, applied in this order:
//   include/exclude: "host1@host2:0,2" (a host alone means all its slots; with
//     ":i,j" only those slot indices); the two are mutually exclusive;
//   num_nodes > 0: keep the first N nodes (error if fewer);
//   nproc_per_node > 0: every node gets exactly that many slots (and its
//     first that many `gpus`; with device_ids, a node without `gpus` gets
//     0..N-1, as DeepSpeed's --num_gpus).
// Slot indices select the host's `gpus` entries when it has any; for a host
// without `gpus` the chosen indices become its device ids (DeepSpeed meaning).
struct NodeFilter {
  std::string include;
  std::string exclude;
  int num_nodes = 0;
  int nproc_per_node = 0;
  bool device_ids = false;
  std::string nproc_source = "--nproc-per-node";  // the option that set nproc_per_node, for errors
};

// Throws InputError (source "--include", "--exclude", ...) for unknown hosts,
// slot indices out of range, both include and exclude, or nothing left.
Hostfile apply_node_filter(Hostfile hostfile, const NodeFilter& filter);

}  // namespace dlaunch
