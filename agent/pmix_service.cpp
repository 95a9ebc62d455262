#include "pmix_service.h"

#include <sched.h>

#include <cstdlib>
#include <exception>
#include <utility>

#include "dlaunch/private_dir.h"
#include "pmix/pmix_job_info.h"
#include "pmix/pmix_library.h"

namespace dlaunch::agent {

namespace {

constexpr const char* kYieldVar = "OMPI_MCA_mpi_yield_when_idle";
constexpr const char* kGdsVar = "PMIX_MCA_gds";

}  // namespace

PmixJob pmix_job_of(const proto::Setup& setup, const NodePlacement& placement) {
  PmixJob job;
  job.nspace = "dlaunch." + setup.job_id;
  job.node_names = setup.node_names;
  job.ranks_per_node.assign(setup.ranks_per_node.begin(), setup.ranks_per_node.end());
  job.node_of_rank.assign(setup.node_of_rank.begin(), setup.node_of_rank.end());
  job.node_rank = setup.node_rank;
  // What mpirun tells its ranks of their placement (pmix/pmix_job_info.h).
  job.cpus = placement.bound_cpus();
  if (placement.policy()) {
    job.map_by = mpirun_map_by(*placement.policy());
    job.bind_to = mpirun_bind_to(*placement.policy(), !job.cpus.empty());
  }
  job.physical_memory = physical_memory();
  job.app_sizes.assign(setup.app_sizes.begin(), setup.app_sizes.end());
  return job;
}

proto::Message fence_up(std::uint32_t seq, std::string data) {
  // One frame carries it: past the limit, the job fails with the reason
  // (rather than an exception out of PMIx's callback).
  if (data.size() + 64 > proto::kMaxFrameBytes) {
    return proto::Fatal{"MPI fence data of this node is " + std::to_string(data.size()) +
                        " bytes, over the control protocol's frame limit of " +
                        std::to_string(proto::kMaxFrameBytes) + " bytes"};
  }
  return proto::FenceUp{seq, std::move(data)};
}

std::optional<PmixStore> pmix_store_of(const proto::Env& start_env, const proto::Env& worker_env) {
  std::string addr, port, secret, path;
  for (const proto::Env* env : {&start_env, &worker_env}) {
    for (const auto& [k, v] : *env) {
      if (k == "DLAUNCH_STORE_ADDR") addr = v;
      if (k == "DLAUNCH_STORE_PORT") port = v;
      if (k == "DLAUNCH_STORE_SECRET") secret = v;
      if (k == "DLAUNCH_STORE_PATH") path = v;
    }
  }
  int port_number = 0;
  try {
    port_number = port.empty() ? 0 : std::stoi(port);
  } catch (const std::exception&) {
    port_number = 0;
  }
  if (addr.empty() || secret.empty() || port_number <= 0 || port_number > 65535)
    return std::nullopt;
  return PmixStore{.host = addr,
                   .port = static_cast<std::uint16_t>(port_number),
                   .secret = secret,
                   .unix_path = path};
}

PmixService::~PmixService() = default;

std::optional<std::string> PmixService::prepare(const proto::Setup& setup,
                                                proto::Ready& /*ready*/) {
  if (!setup.mpi) return std::nullopt;
  PmixJob job = pmix_job_of(setup, placement_);
  ranks_on_host_ =
      setup.ranks_on_host > 0 ? setup.ranks_on_host : static_cast<int>(setup.workers.size());
  if (!setup.workers.empty()) first_worker_env_ = setup.workers.front().env;
  for (const auto& w : setup.workers) {
    bool set = false;
    bool gds = std::getenv(kGdsVar) != nullptr;
    for (const auto& [k, v] : w.env) {
      set = set || k == kYieldVar;
      gds = gds || k == kGdsVar;
    }
    user_set_yield_[w.rank] = set;
    user_set_gds_[w.rank] = gds;
  }
  // PMIx's sockets and Open MPI's shared-memory segments go in here: it must
  // be fresh and private, never a directory someone else made (see
  // dlaunch/private_dir.h); the guard removes it if the agent is killed.
  try {
    job.tmpdir = os_.make_private_dir("dlaunch-pmix-" + setup.job_id + "-node" +
                                      std::to_string(setup.node_rank) + "-");
  } catch (const PrivateDirError& e) {
    return std::string("cannot start the PMIx server for MPI: ") + e.what();
  }
  node_.remove_on_death(job.tmpdir);
  dir_ = job.tmpdir;
  host_ = std::make_unique<PmixHost>(
      io_,
      PmixHost::Callbacks{
          .fence = [this](std::uint32_t seq,
                          std::string data) { node_.send_to_head(fence_up(seq, std::move(data))); },
          .abort =
              [this](int rank, int status, std::string message) {
                node_.send_to_head(proto::WorkerAbort{rank, status, std::move(message)});
              },
      });
  try {
    host_->start(job);
  } catch (const std::exception& e) {
    host_.reset();
    return std::string("cannot start the PMIx server for MPI: ") + e.what();
  }
  return std::nullopt;
}

std::vector<std::string> PmixService::job_dirs() const {
  if (dir_.empty()) return {};
  return {dir_};
}

bool PmixService::handle(const proto::Message& msg) {
  const auto* fence = std::get_if<proto::FenceDown>(&msg);
  if (fence == nullptr) return false;
  if (host_) host_->complete_fence(fence->seq, fence->data);
  return true;
}

// MPI's published names and connects go through the job's store, which the
// workers reach with DLAUNCH_STORE_*: so does the PMIx server.
void PmixService::on_start(const proto::Start& start) {
  if (!host_) return;
  if (auto store = pmix_store_of(start.env, first_worker_env_))
    host_->set_store(store->host, store->port, store->secret, store->unix_path);
}

void PmixService::before_spawn(int rank, WorkerGift& gift) {
  if (!host_) return;
  try {
    for (const auto& e : host_->client_environment(rank)) {
      const auto eq = e.find('=');
      if (eq != std::string::npos) gift.env.emplace_back(e.substr(0, eq), e.substr(eq + 1));
    }
  } catch (const std::exception& e) {
    gift.refused = e.what();
    return;
  }
  if (must_yield(rank)) gift.env.emplace_back(kYieldVar, "1");
  if (gds_hash_ && !user_set_gds_[rank]) gift.env.emplace_back(kGdsVar, "hash");
}

std::optional<PmixVersion> PmixService::server_version() const {
  if (!host_) return std::nullopt;
  const auto& lib = pmix_library();
  if (lib.get_version == nullptr) return std::nullopt;
  const char* text = lib.get_version();
  return text != nullptr ? parse_pmix_version(text) : std::nullopt;
}

// More ranks on this machine than CPUs this agent may use: MPI ranks must
// yield when idle (as mpirun tells them when it oversubscribes), or they
// busy-poll each other off the CPUs. Unless the user decided (the rank's
// variables from the head, or the agent's own environment).
bool PmixService::must_yield(int rank) const {
  if (std::getenv(kYieldVar) != nullptr) return false;
  if (const auto it = user_set_yield_.find(rank); it != user_set_yield_.end() && it->second)
    return false;
  cpu_set_t cpus;
  const int ncpu = ::sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  return ranks_on_host_ > ncpu;
}

// Its names of PMIX_PERSIST_PROC go.
void PmixService::on_worker_exit(int rank) {
  if (host_) host_->rank_exited(rank);
}

void PmixService::stop() {
  if (host_) host_->stop();
}

}  // namespace dlaunch::agent
