// The agent as its node's PMIx server (pmix/pmix_host.h), for --mpi, as a
// node service (service.h): started at Setup with the job's maps and this
// node's placement in mpirun's words (node_placement.h), in a folder of its
// own that the node's container mounts; given the job's store at Start
// (published names and connects meet there); each rank registered as its
// client when it is spawned, which can refuse the spawn; the head's fence
// answers passed on; a rank's persistent names dropped when it exits;
// stopped, its folder removed, at the end.
//
// Without --mpi it does nothing.
//
// Thread safety: none; the agent's event loop only (PmixHost posts its
// upcalls to it).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "node_placement.h"
#include "os.h"
#include "pmix/pmix_host.h"
#include "pmix/pmix_version.h"
#include "service.h"

namespace dlaunch::agent {

// The job as this node's PMIx server registers it: Setup's maps, and the
// placement as mpirun describes it (the folder is the service's to add).
PmixJob pmix_job_of(const proto::Setup& setup, const NodePlacement& placement);

// What goes to the head for this node's fence seq: the data, or a Fatal
// when one frame cannot carry it.
proto::Message fence_up(std::uint32_t seq, std::string data);

// The store MPI's names meet in (DLAUNCH_STORE_*), from Start's variables
// overridden by the workers' own (the per-node mode gives it there); none
// when they do not name a whole one.
struct PmixStore {
  std::string host;
  std::uint16_t port = 0;
  std::string secret;
  std::string unix_path;
};
std::optional<PmixStore> pmix_store_of(const proto::Env& start_env, const proto::Env& worker_env);

class PmixService final : public NodeService {
 public:
  PmixService(boost::asio::io_context& io, AgentOs& os, NodeAccess& node,
              const NodePlacement& placement)
      : io_(io), os_(os), node_(node), placement_(placement) {}
  ~PmixService() override;
  PmixService(const PmixService&) = delete;
  PmixService& operator=(const PmixService&) = delete;

  std::optional<std::string> prepare(const proto::Setup& setup, proto::Ready& ready) override;
  std::vector<std::string> job_dirs() const override;
  bool handle(const proto::Message& msg) override;
  void on_start(const proto::Start& start) override;
  void before_spawn(int rank, WorkerGift& gift) override;
  void on_worker_exit(int rank) override;
  void stop() override;

  // The PMIx this node's server is (its library's own words; nullopt before
  // prepare, without --mpi, or where the library does not say).
  std::optional<PmixVersion> server_version() const;
  // The ranks are clients of another PMIx (an image's, pmix_version.h): they
  // get PMIX_MCA_gds=hash unless the user set PMIX_MCA_gds.
  void use_gds_hash() { gds_hash_ = true; }

 private:
  bool must_yield(int rank) const;

  boost::asio::io_context& io_;
  AgentOs& os_;
  NodeAccess& node_;
  const NodePlacement& placement_;
  std::unique_ptr<PmixHost> host_;      // --mpi, from Setup on
  std::string dir_;                     // its sockets and Open MPI's shared memory
  proto::Env first_worker_env_;         // where the per-node mode names the store
  std::map<int, bool> user_set_yield_;  // by rank: OMPI_MCA_mpi_yield_when_idle is the user's
  std::map<int, bool> user_set_gds_;    // by rank: PMIX_MCA_gds is the user's
  bool gds_hash_ = false;
  int ranks_on_host_ = 0;
};

}  // namespace dlaunch::agent
