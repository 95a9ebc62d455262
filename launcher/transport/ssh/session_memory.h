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
//
// Two things keep that at three pages a node while the job runs:
//  - Where the structure starts in its pages (kStructureOffset): what stays
//    non-zero in libssh2 1.10's is its first 1.7 KB (the fields, and the
//    start of the receive buffer), 1.2 KB at 17 KB (the packet's state and
//    the start of the send buffer) and its last 2.8 KB. From the start of a
//    page, the last part straddles two pages (four in all); 1536 bytes in,
//    each of the three falls in one page.
//  - The two packet buffers inside it (16 KB to receive, 35 KB to send):
//    what a packet left in them is dead once read or sent, but stays in the
//    pages it was written to, so one large packet would keep them all. The
//    session's send and receive go through recv() and send() here (install),
//    which know where those buffers are from what libssh2 passes: a buffer
//    to fill is free space, and what was sent is done with; the pages wholly
//    inside either are given back (what was received when the connection
//    goes quiet, what was sent as soon as it went out).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

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

  // The session's socket I/O through recv() and send() below.
  static void install(LIBSSH2_SESSION* session);
  // libssh2's LIBSSH2_RECV_FUNC and LIBSSH2_SEND_FUNC: the socket calls, and
  // the pages of the packet buffers that hold nothing alive given back.
  static ssize_t recv(libssh2_socket_t fd, void* buf, std::size_t len, int flags, void** abstract);
  static ssize_t send(libssh2_socket_t fd, const void* buf, std::size_t len, int flags,
                      void** abstract);

  // The bytes of the structure's pages that are mapped (mincore), for tests
  // and DLAUNCH_DEBUG=ssh. A page read since it was given back counts,
  // though it maps the kernel's shared zero page and costs no memory.
  std::size_t resident_bytes() const;
  std::size_t block_bytes() const { return mapped_; }

  // Where in its first page the structure starts (see above).
  static constexpr std::size_t kStructureOffset = 1536;

 private:
  // Gives back the pages wholly inside [p, p + n) that lie in the block and
  // are marked in `pages` (bit i: page i); unmarks them.
  void give_back(const void* p, std::size_t n, std::uint64_t& pages);
  // Marks the pages of the block that [p, p + n) touches.
  void mark(const void* p, std::size_t n, std::uint64_t& pages) const;

  void* block_ = nullptr;      // the session structure's pages
  void* structure_ = nullptr;  // the structure in them (block_ + kStructureOffset)
  std::size_t mapped_ = 0;
  bool first_ = true;           // the next allocation is libssh2's first (the structure)
  std::uint64_t received_ = 0;  // pages a receive wrote since they were last given back
};

}  // namespace dlaunch::ssh
