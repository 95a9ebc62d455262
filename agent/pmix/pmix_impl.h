// The PMIx server's state, shared by the files that serve its upcalls
// (pmix_host.cpp: start, fences, abort, the calls not served;
// pmix_names.cpp: publish, lookup, unpublish; pmix_connect.cpp: connect,
// disconnect). Private to agent/pmix.
//
// Threads: an upcall runs on PMIx's progress thread and only copies its
// arguments and posts the work to the loop (post_to_server); the rest of this
// state is the loop's.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <pmix_common.h>

#include "pmix/pmix_host.h"
#include "pmix/store_tasks.h"

namespace dlaunch::agent {

struct PmixHost::Impl {
  boost::asio::io_context& io;
  Callbacks cb;
  PmixJob job;
  bool started = false;
  // Fences waiting for the head, by sequence number.
  std::uint32_t next_seq = 0;
  std::map<std::uint32_t, std::pair<pmix_modex_cbfunc_t, void*>> fences;
  // Published names, connects and disconnects go through the job's store.
  StoreTasks store;
  // How many connects (disconnects) of one set of processes this node has
  // joined: every node hosting one of them joins the same ones in the same
  // order (a set is in one connect at a time), so the count names the round.
  std::map<std::string, std::uint32_t> connects;
  std::map<std::string, std::uint32_t> disconnects;
  // The store keys each local rank published and their persistence, for
  // unpublish without keys and for the names that end with their publisher.
  std::map<pmix_rank_t, std::map<std::string, pmix_persistence_t>> published;

  Impl(boost::asio::io_context& i, Callbacks c) : io(i), cb(std::move(c)), store(i) {}
};

namespace pmix_detail {

// Posts work to the loop with the running server; PMIX_ERR_INIT when there is
// none (stopped). From an upcall, on PMIx's thread.
pmix_status_t post_to_server(std::function<void(PmixHost::Impl&)> work);
// One line on the agent's stderr, which reaches the user: "dlaunch-agent: ...".
void note(const std::string& message);
// "nspace:rank" ("nspace:*" for the wildcard).
std::string proc_name(const pmix_proc_t& proc);

}  // namespace pmix_detail

// The upcalls served elsewhere (pmix_names.cpp, pmix_connect.cpp).
pmix_status_t pmix_publish(const pmix_proc_t* proc, const pmix_info_t info[], size_t ninfo,
                           pmix_op_cbfunc_t cbfunc, void* cbdata);
pmix_status_t pmix_lookup(const pmix_proc_t* proc, char** keys, const pmix_info_t info[],
                          size_t ninfo, pmix_lookup_cbfunc_t cbfunc, void* cbdata);
pmix_status_t pmix_unpublish(const pmix_proc_t* proc, char** keys, const pmix_info_t info[],
                             size_t ninfo, pmix_op_cbfunc_t cbfunc, void* cbdata);
// Removes the names of PMIX_PERSIST_PROC a local rank published (it ended).
void pmix_forget_rank(PmixHost::Impl& impl, pmix_rank_t rank);
pmix_status_t pmix_connect(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[],
                           size_t ninfo, pmix_op_cbfunc_t cbfunc, void* cbdata);
pmix_status_t pmix_disconnect(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[],
                              size_t ninfo, pmix_op_cbfunc_t cbfunc, void* cbdata);

}  // namespace dlaunch::agent
