// PMIx connect and disconnect (under MPI_Comm_connect/accept, MPI_Comm_join,
// MPI_Comm_disconnect): a collective of the nodes that host the processes
// named, as a barrier in the job's store. The processes are of this job's
// namespace, whose data every node already has from MPI_Init's fence, so
// nothing but the meeting needs to cross.
//
// The local PMIx server calls us once every local process named has called;
// the barrier's name is the set of processes and how many times this node
// joined a connect of that set before (each set is in one connect at a time,
// and every node sees its connects in the same order).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include <pmix.h>

#include "pmix/pmix_impl.h"

namespace dlaunch::agent {

namespace {

using pmix_detail::note;
using pmix_detail::post_to_server;

// A connect or disconnect across nodes waits this long for the other nodes'
// processes to join it, unless the call gives a timeout (PMIX_TIMEOUT).
constexpr std::chrono::minutes kConnectTimeout{5};

// A name for a set of processes that fits a store key: its size and a 64-bit
// FNV-1a hash of its sorted names.
std::string set_name(std::vector<std::string> procs) {
  std::sort(procs.begin(), procs.end());
  std::uint64_t h = 1469598103934665603ull;
  for (const auto& p : procs) {
    for (unsigned char c : p + ";") {
      h ^= c;
      h *= 1099511628211ull;
    }
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return std::to_string(procs.size()) + "-" + hex;
}

pmix_status_t collective(const char* what, const pmix_proc_t procs[], size_t nprocs,
                         const pmix_info_t info[], size_t ninfo, pmix_op_cbfunc_t cbfunc,
                         void* cbdata) {
  std::vector<pmix_proc_t> set(procs, procs + nprocs);
  int timeout_s = 0;
  for (size_t k = 0; k < ninfo; ++k) {
    if (PMIX_CHECK_KEY(&info[k], PMIX_TIMEOUT) && info[k].value.type == PMIX_INT) {
      timeout_s = info[k].value.data.integer;
    }
  }
  const bool connect = std::string(what) == "connect";
  return post_to_server(
      [set = std::move(set), timeout_s, connect, what, cbfunc, cbdata](PmixHost::Impl& impl) {
        // The nodes that host the processes named.
        std::set<int> nodes;
        std::vector<std::string> names;
        const PmixJob& job = impl.job;
        int world = static_cast<int>(job.node_of_rank.size());
        if (job.node_of_rank.empty()) {
          for (int n : job.ranks_per_node) world += n;
        }
        auto node_of = [&](int rank) {
          if (!job.node_of_rank.empty()) return job.node_of_rank.at(static_cast<std::size_t>(rank));
          int first = 0;
          for (std::size_t k = 0; k < job.ranks_per_node.size(); ++k) {
            first += job.ranks_per_node[k];
            if (rank < first) return static_cast<int>(k);
          }
          return -1;
        };
        for (const auto& p : set) {
          names.push_back(pmix_detail::proc_name(p));
          if (job.nspace != p.nspace) {
            note(std::string("MPI ") + what + " with " + pmix_detail::proc_name(p) +
                 ", a process of another job: dlaunch connects the processes of one job only; the "
                 "call fails");
            impl.store.run([&impl, cbfunc, cbdata](comm::Store*, const std::string&) {
              return [&impl, cbfunc, cbdata] {
                if (impl.started && cbfunc != nullptr) cbfunc(PMIX_ERR_NOT_SUPPORTED, cbdata);
              };
            });
            return;
          }
          if (p.rank == PMIX_RANK_WILDCARD) {
            for (std::size_t k = 0; k < job.ranks_per_node.size(); ++k) {
              if (job.ranks_per_node[k] > 0) nodes.insert(static_cast<int>(k));
            }
          } else if (static_cast<int>(p.rank) < world) {
            nodes.insert(node_of(static_cast<int>(p.rank)));
          }
        }
        const std::string id = set_name(names);
        const std::uint32_t round = ++(connect ? impl.connects : impl.disconnects)[id];
        const std::string barrier =
            std::string("pmix/") + what + "/" + id + "/" + std::to_string(round);
        const int count = static_cast<int>(nodes.size());
        const auto timeout = timeout_s > 0 ? std::chrono::milliseconds(timeout_s * 1000LL)
                                           : std::chrono::milliseconds(kConnectTimeout);
        impl.store.run([&impl, barrier, count, timeout, what, cbfunc, cbdata](
                           comm::Store* store, const std::string& error) -> StoreTasks::Answer {
          pmix_status_t st = PMIX_SUCCESS;
          if (count <= 1) {
            // Every process named is on this node: nothing to meet.
          } else if (store == nullptr) {
            st = PMIX_ERR_UNREACH;
            note(std::string("MPI ") + what + " failed: cannot reach the job's store: " + error);
          } else {
            try {
              store->barrier(barrier, count, timeout);
            } catch (const std::exception& e) {
              st = PMIX_ERR_TIMEOUT;
              note(std::string("MPI ") + what + " failed: " + e.what());
            }
          }
          return [&impl, st, cbfunc, cbdata] {
            if (impl.started && cbfunc != nullptr) cbfunc(st, cbdata);
          };
        });
      });
}

}  // namespace

pmix_status_t pmix_connect(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[],
                           size_t ninfo, pmix_op_cbfunc_t cbfunc, void* cbdata) {
  return collective("connect", procs, nprocs, info, ninfo, cbfunc, cbdata);
}

pmix_status_t pmix_disconnect(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[],
                              size_t ninfo, pmix_op_cbfunc_t cbfunc, void* cbdata) {
  return collective("disconnect", procs, nprocs, info, ninfo, cbfunc, cbdata);
}

}  // namespace dlaunch::agent
