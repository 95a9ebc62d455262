// Which hosts of the hostfile run the next attempt of a job (head-node
// elasticity, issue 18): `--min-nodes K` drops a node that was lost (its agent
// died, its host went away, its heartbeat stopped) and restarts on the rest,
// as long as K nodes remain; `--spares N` keeps the last N hosts of the
// hostfile idle and puts the first of them in the place of a lost node.
//
// Only a lost node is excluded. A rank that fails on a healthy node restarts
// on the same nodes (that is the program's failure, not the host's): the
// agent answered, and the next attempt would only lose capacity.
//
// Pure: no I/O; the launcher's restart loop (main.cpp) asks it what to run.
#pragma once

#include <string>
#include <vector>

#include "hostfile/hostfile.h"

namespace dlaunch {

struct NodePoolOptions {
  int min_nodes = 0;  // 0: every node is needed (no node is ever dropped)
  int spares = 0;     // the last `spares` hosts wait in reserve
};

class NodePool {
 public:
  // Throws InputError (naming --spares or --min-nodes) when the numbers do
  // not fit the hostfile: spares must leave at least one node, min_nodes at
  // most the nodes that run.
  NodePool(Hostfile hosts, NodePoolOptions opts);

  // The hosts of the next attempt, in node order.
  const Hostfile& active() const { return active_; }
  int spares_left() const { return static_cast<int>(spares_.size()); }
  // Whether a lost node is dropped rather than restarted on (--min-nodes or
  // --spares given).
  bool elastic() const { return elastic_; }

  struct Change {
    bool restart = false;  // false: too few nodes remain; `message` says why
    std::string message;   // one line for the console and the attempt summary
  };
  // Node `node_index` of the active list was lost, for `reason`: exclude its
  // host (every logical node of the same host and name is kept: only this
  // node goes), put a spare in its place or shrink.
  Change node_lost(int node_index, const std::string& reason);

  // Before the first attempt (--preflight): the spare named `name` failed its
  // check and is no spare; false when no spare has that name.
  bool drop_spare(const std::string& name, const std::string& reason);

  // "host (reason)" for each excluded node, in the order they were lost.
  const std::vector<std::string>& excluded() const { return excluded_; }

 private:
  Hostfile active_;
  std::vector<HostEntry> spares_;
  std::vector<std::string> excluded_;
  int min_nodes_ = 0;
  bool elastic_ = false;
};

}  // namespace dlaunch
