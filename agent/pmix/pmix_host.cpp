#include "pmix/pmix_host.h"

#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include <boost/asio/post.hpp>
#include <pmix.h>
#include <pmix_server.h>

#include "dlaunch/error.h"
#include "dlaunch/thread_annotations.h"
#include "dlaunch/tunables.h"
#include "log.h"
#include "pmix/pmix_impl.h"
#include "pmix/pmix_library.h"

namespace dlaunch::agent {

namespace asio = boost::asio;

namespace {

// The server whose upcalls PMIx makes (they carry no context pointer of
// ours). Read on PMIx's progress thread, written on the loop's: under
// g_impl_mu, which an upcall holds until it has posted its work to the loop,
// so that after stop() cleared it (a finalize that hung leaves PMIx's thread
// running) no upcall can reach a server that is gone.
Mutex g_impl_mu;
PmixHost::Impl* g_impl GUARDED_BY(g_impl_mu) = nullptr;

void set_impl(PmixHost::Impl* impl) {
  MutexLock lock(g_impl_mu);
  g_impl = impl;
}

// Waits for one of PMIx's asynchronous registration calls to complete.
struct OpWait {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  pmix_status_t status = PMIX_SUCCESS;
  static void callback(pmix_status_t st, void* self) {
    auto* w = static_cast<OpWait*>(self);
    std::lock_guard<std::mutex> lock(w->m);
    w->status = st;
    w->done = true;
    w->cv.notify_all();
  }
  pmix_status_t wait(pmix_status_t rc) {
    if (rc == PMIX_OPERATION_SUCCEEDED) return PMIX_SUCCESS;
    if (rc != PMIX_SUCCESS) return rc;
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [this] { return done; });
    return status;
  }
};

std::string err(const char* what, pmix_status_t rc) {
  return std::string("PMIx ") + what + " failed: " + pmix_library().error_string(rc);
}

// An array of pmix_info_t that the library's own loader fills and its
// destructor empties (PMIX_INFO_CREATE/LOAD/FREE, without the macros' direct
// calls into a library that is not linked).
class InfoArray {
 public:
  explicit InfoArray(std::size_t n) : info_(n) {
    for (auto& i : info_) std::memset(&i, 0, sizeof i);
  }
  InfoArray(const InfoArray&) = delete;
  InfoArray& operator=(const InfoArray&) = delete;
  ~InfoArray() {
    for (auto& i : info_) pmix_library().value_destruct(&i.value);
  }
  void load(std::size_t k, const char* key, const void* value, pmix_data_type_t type) {
    (void)pmix_library().info_load(&info_.at(k), key, value, type);
  }
  pmix_info_t* data() { return info_.data(); }
  std::size_t size() const { return info_.size(); }

 private:
  std::vector<pmix_info_t> info_;
};

void release_blob(void* blob) { delete static_cast<std::string*>(blob); }

pmix_status_t on_fence(const pmix_proc_t[], size_t, const pmix_info_t[], size_t, char* data,
                       size_t ndata, pmix_modex_cbfunc_t cbfunc, void* cbdata) {
  std::string blob(data != nullptr ? data : "", data != nullptr ? ndata : 0);
  MutexLock lock(g_impl_mu);
  if (g_impl == nullptr) return PMIX_ERR_INIT;
  asio::post(g_impl->io, [impl = g_impl, blob = std::move(blob), cbfunc, cbdata]() mutable {
    const std::uint32_t seq = impl->next_seq++;
    impl->fences[seq] = {cbfunc, cbdata};
    impl->cb.fence(seq, std::move(blob));
  });
  return PMIX_SUCCESS;
}

pmix_status_t on_abort(const pmix_proc_t* proc, void*, int status, const char msg[], pmix_proc_t[],
                       size_t, pmix_op_cbfunc_t cbfunc, void* cbdata) {
  const int rank = static_cast<int>(proc->rank);
  std::string message = msg != nullptr ? msg : "";
  {
    MutexLock lock(g_impl_mu);
    if (g_impl == nullptr) return PMIX_ERR_INIT;
    asio::post(g_impl->io, [impl = g_impl, rank, status, message = std::move(message)] {
      impl->cb.abort(rank, status, message);
    });
  }
  // Release the caller at once: the job is being taken down either way.
  if (cbfunc != nullptr) cbfunc(PMIX_SUCCESS, cbdata);
  return PMIX_SUCCESS;
}

// Calls dlaunch does not serve fail at once, each with a line that says so
// (a NULL entry would also fail, but silently, and Open MPI's own message
// blames "the runtime environment").
pmix_status_t on_spawn(const pmix_proc_t* proc, const pmix_info_t[], size_t,
                       const pmix_app_t apps[], size_t napps, pmix_spawn_cbfunc_t, void*) {
  std::string what;
  for (size_t k = 0; k < napps; ++k) {
    what += (k ? ", " : "") + std::string(apps[k].cmd != nullptr ? apps[k].cmd : "?") + " x" +
            std::to_string(apps[k].maxprocs);
  }
  pmix_detail::note(pmix_detail::proc_name(*proc) + " asked to start processes (" + what +
                    ": MPI_Comm_spawn or PMIx_Spawn): dlaunch does not start processes for "
                    "a running job yet, so the call fails (docs/mpi.md)");
  return PMIX_ERR_NOT_SUPPORTED;
}

// Every process's data reaches every node in MPI_Init's fence: a process
// asking for data that no fence brought gets "not found" now, never a wait.
pmix_status_t on_direct_modex(const pmix_proc_t*, const pmix_info_t[], size_t, pmix_modex_cbfunc_t,
                              void*) {
  return PMIX_ERR_NOT_FOUND;
}

pmix_status_t refuse(const char* what) {
  pmix_detail::note(std::string("a process asked for ") + what +
                    ", which dlaunch's PMIx server does not serve; the call fails");
  return PMIX_ERR_NOT_SUPPORTED;
}

pmix_status_t on_allocate(const pmix_proc_t*, pmix_alloc_directive_t, const pmix_info_t[], size_t,
                          pmix_info_cbfunc_t, void*) {
  return refuse("more resources (PMIx_Allocation_request)");
}

pmix_status_t on_job_control(const pmix_proc_t*, const pmix_proc_t[], size_t, const pmix_info_t[],
                             size_t, pmix_info_cbfunc_t, void*) {
  return refuse("job control (PMIx_Job_control)");
}

pmix_status_t on_group(pmix_group_operation_t, char[], const pmix_proc_t[], size_t,
                       const pmix_info_t[], size_t, pmix_info_cbfunc_t, void*) {
  return refuse("a process group (PMIx_Group_construct/destruct)");
}

pmix_server_module_t g_module = [] {
  pmix_server_module_t m;
  std::memset(&m, 0, sizeof m);
  m.fence_nb = on_fence;
  m.abort = on_abort;
  m.direct_modex = on_direct_modex;
  m.publish = pmix_publish;
  m.lookup = pmix_lookup;
  m.unpublish = pmix_unpublish;
  m.spawn = on_spawn;
  m.connect = pmix_connect;
  m.disconnect = pmix_disconnect;
  m.allocate = on_allocate;
  m.job_control = on_job_control;
  m.group = on_group;
  return m;
}();

// PMIX_LOCALITY_STRING of a process bound to these CPUs ("0-3,8"), as
// libpmix makes it from its topology ("SK0:L30:L20:L10:CR0:HT0:NM0"); empty
// when it cannot.
std::string locality_string(const std::string& cpus) {
  const PmixLibrary& lib = pmix_library();
  pmix_cpuset_t set;
  std::memset(&set, 0, sizeof set);
  if (lib.parse_cpuset_string(("hwloc:" + cpus).c_str(), &set) != PMIX_SUCCESS) return "";
  char* out = nullptr;
  std::string locality;
  if (lib.generate_locality_string(&set, &out) == PMIX_SUCCESS && out != nullptr) locality = out;
  std::free(out);
  lib.cpuset_destruct(&set);
  return locality;
}

std::string join(const std::vector<std::string>& v, char sep) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? std::string(1, sep) : "") + v[i];
  return out;
}

}  // namespace

namespace pmix_detail {

pmix_status_t post_to_server(std::function<void(PmixHost::Impl&)> work) {
  MutexLock lock(g_impl_mu);
  if (g_impl == nullptr) return PMIX_ERR_INIT;
  asio::post(g_impl->io, [impl = g_impl, work = std::move(work)] {
    if (impl->started) work(*impl);
  });
  return PMIX_SUCCESS;
}

void note(const std::string& message) { log(message); }

std::string proc_name(const pmix_proc_t& proc) {
  std::string ns(proc.nspace, strnlen(proc.nspace, sizeof proc.nspace));
  if (proc.rank == PMIX_RANK_WILDCARD) return ns + ":*";
  return ns + ":" + std::to_string(proc.rank);
}

}  // namespace pmix_detail

PmixHost::PmixHost(asio::io_context& io, Callbacks cb)
    : impl_(std::make_unique<Impl>(io, std::move(cb))) {}

PmixHost::~PmixHost() { stop(); }

void PmixHost::start(const PmixJob& job) {
  {
    MutexLock lock(g_impl_mu);
    if (g_impl != nullptr) throw Error(ErrorKind::kInternal, "only one PMIx server per process");
  }
  // Loaded before anything is registered: without it, the reason is all.
  const PmixLibrary& lib = pmix_library();
  impl_->job = job;
  // The caller made job.tmpdir fresh and private: never create it here, where
  // an existing directory (perhaps another user's) would be taken as is.
  set_impl(impl_.get());

  const std::string& host = job.node_names.at(static_cast<std::size_t>(job.node_rank));
  auto node_id = static_cast<std::uint32_t>(job.node_rank);
  pmix_status_t rc = PMIX_SUCCESS;
  {
    InfoArray init(3);
    init.load(0, PMIX_SERVER_TMPDIR, job.tmpdir.c_str(), PMIX_STRING);
    init.load(1, PMIX_HOSTNAME, host.c_str(), PMIX_STRING);
    init.load(2, PMIX_NODEID, &node_id, PMIX_UINT32);
    rc = lib.server_init(&g_module, init.data(), init.size());
  }
  if (rc != PMIX_SUCCESS) {
    set_impl(nullptr);
    throw Error(ErrorKind::kEnvironment, err("server init", rc));
  }
  impl_->started = true;

  // The maps of the whole job: "node0,node1" and "0,1;2,3".
  // MPMD apps on some nodes only can leave a node's ranks apart: "0,2;1,3".
  std::vector<std::vector<std::string>> ranks_of(job.ranks_per_node.size());
  std::vector<std::uint32_t> node_of;   // each rank's node
  std::vector<std::uint16_t> local_of;  // and its place among the node's ranks
  auto place = [&](std::size_t node) {
    local_of.push_back(static_cast<std::uint16_t>(ranks_of.at(node).size()));
    node_of.push_back(static_cast<std::uint32_t>(node));
    ranks_of[node].push_back(std::to_string(node_of.size() - 1));
  };
  if (job.node_of_rank.empty()) {
    for (std::size_t k = 0; k < job.ranks_per_node.size(); ++k) {
      for (int i = 0; i < job.ranks_per_node[k]; ++i) place(k);
    }
  } else {
    for (int node : job.node_of_rank) place(static_cast<std::size_t>(node));
  }
  const auto next = static_cast<int>(node_of.size());
  std::vector<std::string> per_node;
  per_node.reserve(ranks_of.size());
  for (const auto& ranks : ranks_of) per_node.push_back(join(ranks, ','));
  char* node_map = nullptr;
  char* proc_map = nullptr;
  if ((rc = lib.generate_regex(join(job.node_names, ',').c_str(), &node_map)) != PMIX_SUCCESS) {
    throw Error(ErrorKind::kEnvironment, err("node map", rc));
  }
  if ((rc = lib.generate_ppn(join(per_node, ';').c_str(), &proc_map)) != PMIX_SUCCESS) {
    std::free(node_map);
    throw Error(ErrorKind::kEnvironment, err("process map", rc));
  }
  auto world = static_cast<std::uint32_t>(next);
  auto nodes = static_cast<std::uint32_t>(job.node_names.size());
  // mpirun's keys besides: one app, the first job (offset 0), this node's
  // ranks, the policies, the memory (pmix_job_info.h).
  auto here =
      static_cast<std::uint32_t>(job.ranks_per_node.at(static_cast<std::size_t>(job.node_rank)));
  // MPMD: the app of each rank (apps number their ranks in turn); sizes that
  // do not add up to the job are taken as one app.
  std::vector<std::uint32_t> app_of(world, 0);
  std::uint32_t apps = 1;
  {
    long long sum = 0;
    for (int n : job.app_sizes) sum += n > 0 ? n : 0;
    if (!job.app_sizes.empty() && sum == static_cast<long long>(world)) {
      std::uint32_t r = 0;
      for (std::size_t a = 0; a < job.app_sizes.size(); ++a) {
        for (int i = 0; i < job.app_sizes[a]; ++i) app_of[r++] = static_cast<std::uint32_t>(a);
      }
      apps = static_cast<std::uint32_t>(job.app_sizes.size());
    }
  }
  const std::uint32_t offset = 0;
  std::vector<std::unique_ptr<InfoArray>> procs;  // each process's keys, copied by info_load
  std::vector<pmix_data_array_t> arrays;
  procs.reserve(world);
  arrays.reserve(world);
  for (std::uint32_t r = 0; r < world; ++r) {
    const auto cpus = job.cpus.find(static_cast<int>(r));
    std::string locality;
    if (cpus != job.cpus.end()) locality = locality_string(cpus->second);
    // With data of its own, libpmix no longer derives a process's place from
    // the maps: it is all here.
    auto keys = std::make_unique<InfoArray>(7 + (cpus != job.cpus.end() ? 1 : 0) +
                                            (locality.empty() ? 0 : 1));
    pmix_rank_t rank = r;
    std::uint32_t appnum = app_of[r];
    std::size_t k = 0;
    keys->load(k++, PMIX_RANK, &rank, PMIX_PROC_RANK);
    keys->load(k++, PMIX_LOCAL_RANK, &local_of[r], PMIX_UINT16);
    keys->load(k++, PMIX_NODE_RANK, &local_of[r], PMIX_UINT16);
    keys->load(k++, PMIX_NODEID, &node_of[r], PMIX_UINT32);
    keys->load(k++, PMIX_HOSTNAME, job.node_names.at(node_of[r]).c_str(), PMIX_STRING);
    keys->load(k++, PMIX_APPNUM, &appnum, PMIX_UINT32);
    keys->load(k++, PMIX_GLOBAL_RANK, &rank, PMIX_PROC_RANK);
    if (cpus != job.cpus.end()) keys->load(k++, PMIX_CPUSET, cpus->second.c_str(), PMIX_STRING);
    if (!locality.empty()) keys->load(k++, PMIX_LOCALITY_STRING, locality.c_str(), PMIX_STRING);
    pmix_data_array_t a;
    a.type = PMIX_INFO;
    a.size = keys->size();
    a.array = keys->data();
    arrays.push_back(a);
    procs.push_back(std::move(keys));
  }
  InfoArray info(11 + (job.map_by.empty() ? 0 : 1) + (job.bind_to.empty() ? 0 : 1) +
                 (job.physical_memory != 0 ? 1 : 0) + world);
  std::size_t n = 0;
  info.load(n++, PMIX_NODE_MAP, node_map, PMIX_REGEX);
  info.load(n++, PMIX_PROC_MAP, proc_map, PMIX_REGEX);
  info.load(n++, PMIX_JOB_SIZE, &world, PMIX_UINT32);
  info.load(n++, PMIX_UNIV_SIZE, &world, PMIX_UINT32);
  info.load(n++, PMIX_MAX_PROCS, &world, PMIX_UINT32);
  info.load(n++, PMIX_NUM_NODES, &nodes, PMIX_UINT32);
  info.load(n++, PMIX_JOBID, job.nspace.c_str(), PMIX_STRING);
  info.load(n++, PMIX_JOB_NUM_APPS, &apps, PMIX_UINT32);
  info.load(n++, PMIX_NODE_SIZE, &here, PMIX_UINT32);
  info.load(n++, PMIX_NPROC_OFFSET, &offset, PMIX_UINT32);
  info.load(n++, PMIX_RANKBY, "SLOT", PMIX_STRING);  // ranks in slot order, always
  if (!job.map_by.empty()) info.load(n++, PMIX_MAPBY, job.map_by.c_str(), PMIX_STRING);
  if (!job.bind_to.empty()) info.load(n++, PMIX_BINDTO, job.bind_to.c_str(), PMIX_STRING);
  if (job.physical_memory != 0) {
    info.load(n++, PMIX_AVAIL_PHYS_MEMORY, &job.physical_memory, PMIX_UINT64);
  }
  for (auto& a : arrays) info.load(n++, PMIX_PROC_DATA, &a, PMIX_DATA_ARRAY);
  std::free(node_map);
  std::free(proc_map);
  OpWait w;
  pmix_nspace_t ns;
  PMIX_LOAD_NSPACE(ns, job.nspace.c_str());
  rc = w.wait(
      lib.server_register_nspace(ns, job.ranks_per_node.at(static_cast<std::size_t>(job.node_rank)),
                                 info.data(), info.size(), OpWait::callback, &w));
  if (rc != PMIX_SUCCESS) throw Error(ErrorKind::kEnvironment, err("namespace registration", rc));
}

std::vector<std::string> PmixHost::client_environment(int rank) {
  pmix_proc_t proc;
  PMIX_PROC_LOAD(&proc, impl_->job.nspace.c_str(), static_cast<pmix_rank_t>(rank));
  OpWait w;
  const PmixLibrary& lib = pmix_library();
  pmix_status_t rc = w.wait(
      lib.server_register_client(&proc, ::getuid(), ::getgid(), nullptr, OpWait::callback, &w));
  if (rc != PMIX_SUCCESS) throw Error(ErrorKind::kEnvironment, err("client registration", rc));
  char** env = nullptr;
  rc = lib.server_setup_fork(&proc, &env);
  if (rc != PMIX_SUCCESS) throw Error(ErrorKind::kEnvironment, err("setup_fork", rc));
  std::vector<std::string> out;
  for (char** e = env; e != nullptr && *e != nullptr; ++e) {
    out.emplace_back(*e);
    std::free(*e);
  }
  std::free(static_cast<void*>(env));
  // Open MPI must see a direct launch rather than declare itself a singleton
  // (its schizo/orte component would; so would schizo/slurm inside a Slurm
  // allocation when the worker is not in a job step: "managed singleton"),
  // and logical nodes sharing one machine need their own shared-memory
  // segment directory.
  out.emplace_back("OMPI_MCA_schizo=^orte,slurm");
  out.emplace_back("OMPI_MCA_btl_vader_backing_directory=" + impl_->job.tmpdir);
  // Open MPI's session directory (/tmp/ompi.<host>.<uid>, a predictable name
  // that Open MPI takes as it finds it when it is writable) inside the
  // private one as well.
  out.emplace_back("OMPI_MCA_orte_tmpdir_base=" + impl_->job.tmpdir);
  return out;
}

void PmixHost::set_store(const std::string& host, std::uint16_t port, const std::string& secret,
                         const std::string& unix_path) {
  comm::StoreOptions opts;
  opts.host = host;
  opts.port = port;
  opts.secret = secret;
  opts.unix_path = unix_path;
  // Short: the agent waits for a task that is still connecting when the job ends.
  opts.connect_timeout = std::chrono::seconds(5);
  impl_->store.configure(std::move(opts));
}

void PmixHost::rank_exited(int rank) {
  if (impl_ && impl_->started) pmix_forget_rank(*impl_, static_cast<pmix_rank_t>(rank));
}

void PmixHost::complete_fence(std::uint32_t seq, const std::string& all_data) {
  // A FenceDown that arrives once the server is stopped (the job ending while
  // a fence was open) must not call into PMIx: its callback would wake an
  // event base that finalize took down, and the agent blocked there on a
  // lock for good (seen: an agent left behind its job, asleep in
  // event_active).
  if (!impl_ || !impl_->started) return;
  auto it = impl_->fences.find(seq);
  if (it == impl_->fences.end()) return;
  auto [cbfunc, cbdata] = it->second;
  impl_->fences.erase(it);
  auto* blob = new std::string(all_data);  // freed by PMIx through release_blob
  cbfunc(PMIX_SUCCESS, blob->data(), blob->size(), cbdata, release_blob, blob);
}

namespace {
std::atomic<bool> g_finalize_hung{false};
}

bool PmixHost::finalize_hung() { return g_finalize_hung.load(); }

void PmixHost::stop() {
  if (!impl_ || !impl_->started) return;
  impl_->started = false;
  // PMIx_server_finalize can block for good on a lock inside libpmix (seen
  // with 64 PMIx servers on one machine after its "UNREACHABLE" connection
  // errors), and an agent that never exits outlives its job. So finalize on a
  // helper thread and stop waiting after a deadline; the agent then reports
  // and exits regardless (agent/main.cpp: _exit when finalize_hung()).
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> finished = done->get_future();
  std::thread([done, finalize = pmix_library().server_finalize] {
    finalize();
    done->set_value();
  }).detach();
  if (finished.wait_for(timing::kPmixFinalize) != std::future_status::ready) {
    g_finalize_hung = true;
    std::fprintf(stderr,
                 "dlaunch-agent: the PMIx server did not finalize within %lld ms; leaving it\n",
                 static_cast<long long>(timing::kPmixFinalize.count()));
  }
  set_impl(nullptr);
  impl_->store.stop();    // no answer reaches PMIx after this
  impl_->fences.clear();  // PMIx is gone: nobody can be answered
  std::error_code ec;
  std::filesystem::remove_all(impl_->job.tmpdir, ec);  // also pmix_dstor_* of a killed server
}

}  // namespace dlaunch::agent
