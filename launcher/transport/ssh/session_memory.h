// The head's memory per SSH node: libssh2 1.10 allocates its session
// structure whole (54,840 bytes) and zeroes it, and keeps it for the
// connection's life, so 1024 nodes hold 55 MiB of it. Most of it stays zero:
// state of what a connection made by dlaunch never does (SCP, SFTP, keyboard
// authentication, agent forwarding...), and the handshake's and the
// authentication's state, cleared when they are done (measured: 10 of its 12
// whole pages are all zero once the agent's channel is open).
//
// SessionPages is the allocator dlaunch gives libssh2 for a session
// (libssh2_session_init_ex): the session structure, its first allocation,
// goes in pages of its own (an anonymous private mapping); everything else
// to malloc, as before. release_zero_pages() then gives every page of it
// that is all zero back to the kernel (madvise MADV_DONTNEED): such a page
// reads as zero afterwards, as it did, and is mapped again when libssh2 next
// writes to it. So what the head holds per node is what libssh2 actually
// uses. It must run on the thread that uses the session (the event loop),
// between libssh2 calls: a page written during the scan would be lost.
#pragma once

#include <cstddef>

#include <libssh2.h>

namespace dlaunch::ssh {

class SessionPages {
 public:
  SessionPages() = default;
  ~SessionPages();  // unmaps the block if libssh2 did not free it
  SessionPages(const SessionPages&) = delete;
  SessionPages& operator=(const SessionPages&) = delete;

  // The session's allocator: pass these and `this` (as the abstract
  // pointer) to libssh2_session_init_ex. `this` must outlive the session.
  static void* alloc(std::size_t n, void** abstract);
  static void free(void* p, void** abstract);
  static void* realloc(void* p, std::size_t n, void** abstract);

  // Gives the all-zero pages of the session structure back; returns how
  // many bytes that gave back (pages that were resident and are not now).
  std::size_t release_zero_pages();

  // The bytes of the structure's pages that are mapped (mincore), for tests
  // and DLAUNCH_DEBUG=ssh. A page read since it was given back counts,
  // though it maps the kernel's shared zero page and costs no memory.
  std::size_t resident_bytes() const;
  std::size_t block_bytes() const { return mapped_; }

 private:
  void* block_ = nullptr;  // the session structure's pages
  std::size_t mapped_ = 0;
  bool first_ = true;  // the next allocation is libssh2's first (the structure)
};

}  // namespace dlaunch::ssh
