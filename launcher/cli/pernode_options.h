// Per-node mode's command line: torchrun's options (both spellings, as
// torchrun accepts them), what selects the mode, and the options refused by
// name. See docs/per-node.md.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace dlaunch {

struct Options;

struct PerNodeOptions {
  bool enabled = false;      // per-node mode: this launcher runs one node of the job
  std::string nnodes = "1";  // N or MIN:MAX
  int min_nodes = 1;
  int max_nodes = 1;
  std::string nproc = "1";   // --nproc-per-node: N | gpu | cpu | auto
  int node_rank = -1;        // --node-rank; -1: not given (c10d assigns it)
  std::string rdzv_backend;  // static | c10d (empty: static with --node-rank, else c10d)
  std::string rdzv_endpoint;
  std::string rdzv_id = "none";
  std::string rdzv_conf;  // key=value,... (docs/per-node.md)
  bool standalone = false;
  double monitor_interval_s = 0.1;  // accepted; dlaunch does not poll (SIGCHLD)
  std::string role = "default";
  std::string local_addr;
  bool no_python = false;
  bool module = false;
  bool run_path = false;
  std::string log_dir;
  std::string redirects;
  std::string tee;
  std::string local_ranks_filter;
  double shutdown_timeout_s = -1;   // --shutdown-timeout; < 0: not given
  bool virtual_local_rank = false;  // --virtual-local-rank
  std::string logs_specs;           // --logs-specs: "default" only
  std::string event_log_handler;    // --event-log-handler: "null" or "console"
  std::string signals_to_handle;    // --signals-to-handle (else TORCHELASTIC_SIGNALS_TO_HANDLE)
  std::string numa_binding;         // --numa-binding: node|socket|exclusive|core-complex
  bool master_addr_given = false;
  bool master_port_given = false;
};

// Registers torchrun's options on app (group "Per-node mode (torchrun)"),
// --nproc-per-node included (it means ranks per node in both modes).
void add_pernode_options(CLI::App& app, Options& o);

// After parsing: decides the mode, converts --nproc-per-node for the head
// mode, refuses what makes no sense in the mode chosen (InputError naming the
// option), and in per-node mode rewrites the command for Python (a first word
// ending in .py, -m, --run-path; not with --no-python; the head-node mode's
// apps are rewritten by parse_options once they are known).
void finish_pernode_options(const CLI::App& app, Options& o);

// torchrun's --redirects / --tee value: N, or LOCAL_RANK:N,... with N 0-3
// (none, stdout, stderr, both); key -1 for the value of every local rank.
// InputError naming `option`.
std::map<int, int> parse_std_spec(const std::string& text, const char* option);

// The Python that runs `.py` programs and -m modules: $PYTHON_EXEC (as
// torchrun honours it), else python3 on PATH.
std::string pernode_python();

// `command` as torchrun runs it (both modes): with -m, `python3 -m` before
// it; a first word ending in .py, or --run-path, under python3; as it is
// with --no-python. InputError for -m with --no-python.
// Returns the interpreter put before the command, or empty.
std::string with_python(const PerNodeOptions& p, std::vector<std::string>& command);

}  // namespace dlaunch
