// What the job plan alone says about the job's network, before any agent
// runs: whether MASTER_ADDR is given or chosen at start (master_address.h),
// and what --dry-run shows for it.
#pragma once

#include <optional>
#include <string>

#include "plan/plan.h"

namespace dlaunch::net {

// Every node runs on the head's machine (the local transport): nothing else
// has to reach node 0, and MASTER_ADDR stays 127.0.0.1 as it always was.
bool all_local(const JobPlan& plan);

// MASTER_ADDR as the user gave it: --master-addr (master_addr_explicit), or
// node 0's `address:` in the hostfile. These always win.
std::optional<std::string> given_master_addr(const JobPlan& plan, bool master_addr_explicit);

// Whether the other nodes test which of node 0's addresses they reach at
// start: only for a job on more than one machine, more than one node, and
// MASTER_ADDR not given. probe_only (--check's network test): also a given
// address, if it is an IP address, to report whether every node reaches it.
bool probe_wanted(const JobPlan& plan, bool master_addr_explicit, bool probe_only);

// MASTER_ADDR as --dry-run shows it: the address where it is known before
// start, else a note that it is chosen then.
std::string dry_run_master_addr(const JobPlan& plan, bool master_addr_explicit);

// --dry-run's line about the interface variables the workers get at start;
// empty when they get none (a job on this machine alone, or MASTER_ADDR
// given as a name).
std::string dry_run_interface_note(const JobPlan& plan, bool master_addr_explicit, bool mpi);

}  // namespace dlaunch::net
