// Hosts from the batch allocation dlaunch runs in, when no -H/--hostfile/-n
// names them: Flux (the instance's resource set R), Slurm (slurm.h), PBS and
// Torque (PBS_NODEFILE), LSF (LSB_DJOB_HOSTFILE, else LSB_MCPU_HOSTS) and
// SGE/UGE (PE_HOSTFILE). See docs/schedulers.md.
//
// The parsers are pure; every malformed input throws InputError naming the
// file (or variable), the line, the column and the field. find_allocation
// reads files and runs `flux resource R` only through the probe's callbacks.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hostfile/hostfile.h"

namespace dlaunch {

// In the order of precedence: the first one present wins (docs/schedulers.md).
enum class Scheduler { kFlux, kSlurm, kPbs, kLsf, kSge };

// "Flux", "Slurm", "PBS", "LSF", "SGE".
const char* scheduler_name(Scheduler s);

// A host once per slot, one per line (PBS_NODEFILE, LSB_DJOB_HOSTFILE): every
// host once, in the order it first appears, with as many slots as it has
// lines (they need not be adjacent). Blank lines are skipped. `variable`
// names the file's variable in messages; `source` is the file's path.
Hostfile parse_host_per_slot(std::string_view text, const std::string& source,
                             const std::string& variable);

// LSB_MCPU_HOSTS: "host1 n1 host2 n2 ..." (whitespace-separated pairs).
Hostfile parse_lsf_mcpu_hosts(std::string_view text);

// PE_HOSTFILE: lines "host slots queue processor-range"; the queue and the
// range are optional and not used. A host on several lines (slots from two
// queues) gets their sum.
Hostfile parse_pe_hostfile(std::string_view text, const std::string& source);

// Flux's resource set R (RFC 20, the JSON of `flux resource R`): the hosts of
// execution.nodelist (RFC 29 hostlists) in broker-rank order, each with one
// slot per GPU of its R_lite entry, else one per core. `source` names the
// text in messages.
Hostfile parse_flux_r(std::string_view text, const std::string& source);

// RFC 22 idset "0-3,5" (brackets allowed): the ids, ascending.
std::vector<int> parse_idset(std::string_view text, const SourcePos& pos, const std::string& field);

// What find_allocation may read and run, injectable for tests.
struct AllocationProbe {
  std::vector<std::string> env;  // "NAME=VALUE"
  std::string this_host;         // gethostname(); the node dlaunch runs on
  // The contents of a node file the variable names (read_input_file).
  std::function<std::string(const std::string& path, const std::string& variable)> read_file;
  // The JSON of `flux resource R` (throws InputError when it cannot be had).
  std::function<std::string()> flux_resource_r;
  // The program of a scheduler's remote start (qrsh, blaunch, flux, or a
  // site's wrapper), and whether it can be run here.
  std::function<std::string(Transport)> remote_start_program;
  std::function<bool(const std::string& program)> on_path;
};

struct Allocation {
  Scheduler scheduler = Scheduler::kSlurm;
  Hostfile hosts;
  std::string from;  // the variable (and file) the hosts came from
  // How the nodes other than this one start, and why, for --dry-run.
  std::string remote_start;
  // Variables of other schedulers that are set too, ignored by precedence.
  std::vector<std::string> ignored;
};

// The allocation dlaunch runs in, or nullopt when none of the schedulers'
// variables is set. The node dlaunch runs on (short name equal to
// this_host's, or a loopback name) runs its agent locally with `address` set
// to its name; the others start through the scheduler's remote start where
// it can carry the control channel and is installed (SGE qrsh -inherit, LSF
// blaunch, Flux flux run, Slurm srun), else over SSH (always for PBS: its
// tm_spawn-based pbsdsh and pbs_tmrsh connect no stdin/stdout to the caller).
std::optional<Allocation> find_allocation(const AllocationProbe& probe);

}  // namespace dlaunch
