// PMIx publish, lookup and unpublish (MPI_Publish_name, MPI_Lookup_name,
// MPI_Unpublish_name, and the port names under MPI_Comm_connect/accept),
// served by the job's store: the names live as long as the job's store, and
// only the job's processes (which hold its secret) see them.
//
// Keys: pmix/names/session/<name> for the default range (PMIX_RANGE_SESSION,
// and every wider one: a dlaunch job is its own session), pmix/names/ns/
// <nspace>/<name> for PMIX_RANGE_NAMESPACE. The value: publisher's nspace,
// rank and persistence, each ending in '\n', then the value's type and bytes
// (strings, byte objects and scalars: what MPI and mpi4py publish).
#include <chrono>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <pmix.h>

#include "pmix/pmix_impl.h"
#include "pmix/pmix_library.h"

namespace dlaunch::agent {

namespace {

using pmix_detail::note;
using pmix_detail::post_to_server;

// The byte size of the scalar types a name may hold (0: not a scalar).
std::size_t scalar_size(pmix_data_type_t t) {
  switch (t) {
    case PMIX_BOOL:
      return sizeof(bool);
    case PMIX_BYTE:
    case PMIX_INT8:
    case PMIX_UINT8:
      return 1;
    case PMIX_INT16:
    case PMIX_UINT16:
      return 2;
    case PMIX_INT32:
    case PMIX_UINT32:
    case PMIX_INT:
    case PMIX_UINT:
    case PMIX_FLOAT:
    case PMIX_STATUS:
    case PMIX_PROC_RANK:
    case PMIX_PID:
      return 4;
    case PMIX_INT64:
    case PMIX_UINT64:
    case PMIX_SIZE:
    case PMIX_DOUBLE:
      return 8;
    default:
      return 0;
  }
}

// A value as the store keeps it; nullopt for a type names cannot hold.
std::optional<std::string> encode_value(const pmix_value_t& v) {
  std::string out = std::to_string(v.type) + "\n";
  if (v.type == PMIX_STRING) {
    if (v.data.string != nullptr) out += v.data.string;
  } else if (v.type == PMIX_BYTE_OBJECT) {
    if (v.data.bo.bytes != nullptr) out.append(v.data.bo.bytes, v.data.bo.size);
  } else if (std::size_t n = scalar_size(v.type); n != 0 && n <= sizeof v.data) {
    out.append(reinterpret_cast<const char*>(&v.data), n);
  } else {
    return std::nullopt;
  }
  return out;
}

// Loads what encode_value made into v (with the library's allocation, which
// PMIx_Value_destruct frees). False when it is not one of ours.
bool decode_value(const std::string& in, pmix_value_t* v) {
  const auto nl = in.find('\n');
  if (nl == std::string::npos) return false;
  const auto type = static_cast<pmix_data_type_t>(std::stoul(in.substr(0, nl)));
  const std::string body = in.substr(nl + 1);
  const PmixLibrary& lib = pmix_library();
  if (type == PMIX_STRING) return lib.value_load(v, body.c_str(), PMIX_STRING) == PMIX_SUCCESS;
  if (type == PMIX_BYTE_OBJECT) {
    pmix_byte_object_t bo;
    bo.bytes = const_cast<char*>(body.data());
    bo.size = body.size();
    return lib.value_load(v, &bo, PMIX_BYTE_OBJECT) == PMIX_SUCCESS;
  }
  const std::size_t n = scalar_size(type);
  if (n == 0 || body.size() != n) return false;
  return lib.value_load(v, body.data(), type) == PMIX_SUCCESS;
}

struct Record {
  std::string nspace;
  pmix_rank_t rank = 0;
  pmix_persistence_t persistence = PMIX_PERSIST_SESSION;
  std::string value;  // encode_value's
};

std::string encode_record(const Record& r) {
  return r.nspace + "\n" + std::to_string(r.rank) + "\n" + std::to_string(r.persistence) + "\n" +
         r.value;
}

std::optional<Record> decode_record(const std::string& s) {
  Record r;
  const auto a = s.find('\n');
  const auto b = a == std::string::npos ? a : s.find('\n', a + 1);
  const auto c = b == std::string::npos ? b : s.find('\n', b + 1);
  if (c == std::string::npos) return std::nullopt;
  try {
    r.nspace = s.substr(0, a);
    r.rank = static_cast<pmix_rank_t>(std::stoul(s.substr(a + 1, b - a - 1)));
    r.persistence = static_cast<pmix_persistence_t>(std::stoul(s.substr(b + 1, c - b - 1)));
  } catch (const std::exception&) {
    return std::nullopt;
  }
  r.value = s.substr(c + 1);
  return r;
}

std::string store_key(pmix_data_range_t range, const std::string& nspace, const std::string& name) {
  if (range == PMIX_RANGE_NAMESPACE) return "pmix/names/ns/" + nspace + "/" + name;
  return "pmix/names/session/" + name;
}

// The directives among a publish's, lookup's or unpublish's info.
struct Directives {
  pmix_data_range_t range = PMIX_RANGE_SESSION;
  pmix_persistence_t persistence = PMIX_PERSIST_SESSION;
  bool wait = false;
  int timeout_s = 0;  // 0: none
};

bool is_directive(const pmix_info_t& i, Directives& d) {
  if (PMIX_CHECK_KEY(&i, PMIX_RANGE)) {
    d.range = i.value.data.range;
  } else if (PMIX_CHECK_KEY(&i, PMIX_PERSISTENCE)) {
    d.persistence = i.value.data.persist;
  } else if (PMIX_CHECK_KEY(&i, PMIX_WAIT)) {
    // An int (how many keys to wait for) or a bool, as clients send it.
    d.wait = i.value.type == PMIX_BOOL ? i.value.data.flag : true;
  } else if (PMIX_CHECK_KEY(&i, PMIX_TIMEOUT)) {
    d.timeout_s = i.value.type == PMIX_INT ? i.value.data.integer : 0;
  } else if (PMIX_CHECK_KEY(&i, PMIX_USERID) || PMIX_CHECK_KEY(&i, PMIX_GRPID)) {
    // Added by the server: every process of the job is this user's.
  } else {
    return false;
  }
  return true;
}

// A lookup's or unpublish's request: its directives (every info is one) and
// the names it gives.
struct NameRequest {
  Directives d;
  std::vector<std::string> names;
};
NameRequest name_request(char** keys, const pmix_info_t info[], size_t ninfo) {
  NameRequest r;
  for (size_t k = 0; k < ninfo; ++k) (void)is_directive(info[k], r.d);
  for (char** k = keys; k != nullptr && *k != nullptr; ++k) r.names.emplace_back(*k);
  return r;
}

// The key's value if it is there now, without waiting for it.
std::optional<std::string> try_get(comm::Store& store, const std::string& key) {
  if (!store.check({key})) return std::nullopt;
  try {
    return store.get(key, std::chrono::milliseconds(100));
  } catch (const comm::StoreError& e) {
    if (e.cause() == comm::StoreError::Cause::kTimedOut) return std::nullopt;  // gone meanwhile
    throw;
  }
}

std::string why(const std::string& store_error) {
  return store_error.empty() ? "" : ": " + store_error;
}

// Deletes each key that still holds a name of this publisher.
void delete_own(comm::Store& store, const pmix_proc_t& who, const std::set<std::string>& keys) {
  for (const auto& key : keys) {
    auto value = try_get(store, key);
    auto r = value ? decode_record(*value) : std::nullopt;
    if (r && r->nspace == who.nspace && r->rank == who.rank) store.delete_key(key);
  }
}

}  // namespace

void pmix_forget_rank(PmixHost::Impl& impl, pmix_rank_t rank) {
  auto it = impl.published.find(rank);
  if (it == impl.published.end()) return;
  std::set<std::string> keys;
  for (const auto& [key, persistence] : it->second) {
    if (persistence == PMIX_PERSIST_PROC) keys.insert(key);
  }
  impl.published.erase(it);
  if (keys.empty()) return;
  pmix_proc_t who;
  PMIX_PROC_LOAD(&who, impl.job.nspace.c_str(), rank);
  impl.store.run([who, keys](comm::Store* store, const std::string&) -> StoreTasks::Answer {
    try {
      if (store != nullptr) delete_own(*store, who, keys);
    } catch (const std::exception& e) {
      note("the names of " + pmix_detail::proc_name(who) + " outlive it: " + e.what());
    }
    return nullptr;
  });
}

pmix_status_t pmix_publish(const pmix_proc_t* proc, const pmix_info_t info[], size_t ninfo,
                           pmix_op_cbfunc_t cbfunc, void* cbdata) {
  Directives d;
  std::vector<std::pair<std::string, std::string>> names;  // name, encoded value
  for (size_t k = 0; k < ninfo; ++k) {
    if (is_directive(info[k], d)) continue;
    auto value = encode_value(info[k].value);
    if (!value) {
      note("a name published by " + pmix_detail::proc_name(*proc) + " (" + info[k].key +
           ") has a type that dlaunch does not keep");
      return PMIX_ERR_NOT_SUPPORTED;
    }
    names.emplace_back(info[k].key, std::move(*value));
  }
  const pmix_proc_t who = *proc;
  return post_to_server([who, d, names = std::move(names), cbfunc, cbdata](PmixHost::Impl& impl) {
    Record r{.nspace = who.nspace, .rank = who.rank, .persistence = d.persistence};
    std::vector<std::pair<std::string, std::string>> keys;
    for (const auto& [name, value] : names) {
      r.value = value;
      keys.emplace_back(store_key(d.range, who.nspace, name), encode_record(r));
      impl.published[who.rank][keys.back().first] = d.persistence;
    }
    impl.store.run([&impl, keys, cbfunc, cbdata, who](
                       comm::Store* store, const std::string& error) -> StoreTasks::Answer {
      pmix_status_t st = PMIX_SUCCESS;
      std::string problem;
      if (store == nullptr) {
        st = PMIX_ERR_UNREACH;
        problem = "cannot reach the job's store" + why(error);
      }
      for (const auto& [key, record] : keys) {
        if (st != PMIX_SUCCESS) break;
        try {
          // As mpirun's data server: a name published again takes the new
          // value and publisher.
          store->set(key, record);
        } catch (const std::exception& e) {
          st = PMIX_ERROR;
          problem = e.what();
        }
      }
      if (!problem.empty()) {
        note("publish of " + pmix_detail::proc_name(who) + " failed: " + problem);
      }
      return [&impl, st, cbfunc, cbdata] {
        if (impl.started && cbfunc != nullptr) cbfunc(st, cbdata);
      };
    });
  });
}

pmix_status_t pmix_lookup(const pmix_proc_t* proc, char** keys, const pmix_info_t info[],
                          size_t ninfo, pmix_lookup_cbfunc_t cbfunc, void* cbdata) {
  NameRequest req = name_request(keys, info, ninfo);
  const Directives d = req.d;
  std::vector<std::string> names = std::move(req.names);
  const pmix_proc_t who = *proc;
  return post_to_server([who, d, names = std::move(names), cbfunc, cbdata](PmixHost::Impl& impl) {
    impl.store.run([&impl, who, d, names, cbfunc, cbdata](
                       comm::Store* store, const std::string& error) -> StoreTasks::Answer {
      // name -> record found
      std::vector<std::pair<std::string, Record>> found;
      pmix_status_t st = PMIX_SUCCESS;
      if (store == nullptr) {
        st = PMIX_ERR_UNREACH;
        note("lookup of " + pmix_detail::proc_name(who) + " failed: cannot reach the job's store" +
             why(error));
      }
      for (const auto& name : names) {
        if (st != PMIX_SUCCESS) break;
        // Its own namespace's names first, then the job's.
        const std::string ns_key = store_key(PMIX_RANGE_NAMESPACE, who.nspace, name);
        const std::string session_key = store_key(PMIX_RANGE_SESSION, who.nspace, name);
        try {
          std::optional<std::string> value;
          for (const std::string* key : {&ns_key, &session_key}) {
            value = try_get(*store, *key);
            if (!value) continue;
            if (auto r = decode_record(*value); r && r->persistence == PMIX_PERSIST_FIRST_READ)
              store->delete_key(*key);
            break;
          }
          if (!value && d.wait) {
            // Until it comes: within the timeout given, else for as long as the job runs
            // (stop() interrupts the wait).
            const std::string& key = d.range == PMIX_RANGE_NAMESPACE ? ns_key : session_key;
            if (d.timeout_s > 0) {
              value = store->get(key, std::chrono::seconds(d.timeout_s));
            } else {
              for (;;) {
                try {
                  value = store->get(key, std::chrono::seconds(60));
                  break;
                } catch (const comm::StoreError& e) {
                  if (e.cause() != comm::StoreError::Cause::kTimedOut) throw;
                }
              }
            }
          }
          if (value) {
            if (auto r = decode_record(*value)) found.emplace_back(name, std::move(*r));
          }
        } catch (const comm::StoreError& e) {
          if (e.cause() == comm::StoreError::Cause::kTimedOut) {
            st = PMIX_ERR_TIMEOUT;
          } else {
            st = PMIX_ERROR;
            note("lookup of " + pmix_detail::proc_name(who) + " failed: " + e.what());
          }
        }
      }
      if (st == PMIX_SUCCESS && found.empty()) st = PMIX_ERR_NOT_FOUND;
      return [&impl, st, found = std::move(found), cbfunc, cbdata] {
        if (!impl.started || cbfunc == nullptr) return;
        std::vector<pmix_pdata_t> data(found.size());
        std::size_t n = 0;
        for (const auto& [name, r] : found) {
          pmix_pdata_t& p = data[n];
          std::memset(&p, 0, sizeof p);
          PMIX_PROC_LOAD(&p.proc, r.nspace.c_str(), r.rank);
          PMIX_LOAD_KEY(p.key, name.c_str());
          if (decode_value(r.value, &p.value)) ++n;
        }
        cbfunc(n == 0 && st == PMIX_SUCCESS ? PMIX_ERR_NOT_FOUND : st, data.data(), n, cbdata);
        for (std::size_t k = 0; k < n; ++k) pmix_library().value_destruct(&data[k].value);
      };
    });
  });
}

pmix_status_t pmix_unpublish(const pmix_proc_t* proc, char** keys, const pmix_info_t info[],
                             size_t ninfo, pmix_op_cbfunc_t cbfunc, void* cbdata) {
  NameRequest req = name_request(keys, info, ninfo);
  const Directives d = req.d;
  std::vector<std::string> names = std::move(req.names);
  const pmix_proc_t who = *proc;
  return post_to_server([who, d, names = std::move(names), cbfunc, cbdata](PmixHost::Impl& impl) {
    // No names: every name this process published.
    std::set<std::string> store_keys;
    auto& mine = impl.published[who.rank];
    if (names.empty()) {
      for (const auto& [key, persistence] : mine) store_keys.insert(key);
    } else {
      for (const auto& name : names) store_keys.insert(store_key(d.range, who.nspace, name));
    }
    for (const auto& k : store_keys) mine.erase(k);
    impl.store.run([&impl, who, store_keys, cbfunc, cbdata](
                       comm::Store* store, const std::string& error) -> StoreTasks::Answer {
      pmix_status_t st = PMIX_SUCCESS;
      if (store == nullptr) {
        st = PMIX_ERR_UNREACH;
        note("unpublish of " + pmix_detail::proc_name(who) +
             " failed: cannot reach the job's store" + why(error));
      }
      if (st == PMIX_SUCCESS) {
        try {
          // Only its publisher removes a name; as under mpirun, unpublishing a
          // name that is not there (or another's) is no error.
          delete_own(*store, who, store_keys);
        } catch (const std::exception& e) {
          st = PMIX_ERROR;
          note("unpublish of " + pmix_detail::proc_name(who) + " failed: " + e.what());
        }
      }
      return [&impl, st, cbfunc, cbdata] {
        if (impl.started && cbfunc != nullptr) cbfunc(st, cbdata);
      };
    });
  });
}

}  // namespace dlaunch::agent
