// Where the head's memory per SSH node goes, libssh2's share measured apart:
// opens N SSH connections the way dlaunch holds them (handshake, public-key
// authentication, one exec channel left open), with libssh2's allocations
// counted through libssh2_session_init_ex's alloc/free/realloc callbacks,
// and reports per connection: libssh2's live bytes (and the size of its first
// allocation, the session structure), the whole heap's growth (mallinfo2:
// libssh2, OpenSSL's cipher and MAC contexts, glibc's own overhead) and the
// resident set's. Blocking mode, one connection after the other: what stays
// per connection, not what a connection needs while it is made.
//
//   ssh_session_memory HOSTS_FILE PORT USER KEY_FILE N [COMMAND]
//
// HOSTS_FILE: one address a line (tests/testbed/wide.sh's hosts.list).
#include <arpa/inet.h>
#include <malloc.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <libssh2.h>

namespace {

long long live_bytes = 0;
long long peak_bytes = 0;
long long first_alloc = -1;
constexpr std::size_t kHeader = 16;

void* count_alloc(std::size_t n, void** /*abstract*/) {
  auto* p = static_cast<char*>(std::malloc(n + kHeader));
  if (p == nullptr) return nullptr;
  std::memcpy(p, &n, sizeof n);
  live_bytes += static_cast<long long>(n);
  if (live_bytes > peak_bytes) peak_bytes = live_bytes;
  if (first_alloc < 0) first_alloc = static_cast<long long>(n);
  return p + kHeader;
}

void count_free(void* ptr, void** /*abstract*/) {
  if (ptr == nullptr) return;
  char* p = static_cast<char*>(ptr) - kHeader;
  std::size_t n = 0;
  std::memcpy(&n, p, sizeof n);
  live_bytes -= static_cast<long long>(n);
  std::free(p);
}

void* count_realloc(void* ptr, std::size_t n, void** abstract) {
  if (ptr == nullptr) return count_alloc(n, abstract);
  char* p = static_cast<char*>(ptr) - kHeader;
  std::size_t old = 0;
  std::memcpy(&old, p, sizeof old);
  auto* q = static_cast<char*>(std::realloc(p, n + kHeader));
  if (q == nullptr) return nullptr;
  std::memcpy(q, &n, sizeof n);
  live_bytes += static_cast<long long>(n) - static_cast<long long>(old);
  if (live_bytes > peak_bytes) peak_bytes = live_bytes;
  return q + kHeader;
}

long long rss_kib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6);
  }
  return 0;
}

long long heap_bytes() { return static_cast<long long>(mallinfo2().uordblks); }

int fail(const char* what, LIBSSH2_SESSION* s) {
  char* msg = nullptr;
  if (s != nullptr) libssh2_session_last_error(s, &msg, nullptr, 0);
  std::fprintf(stderr, "ssh_session_memory: %s: %s\n", what, msg != nullptr ? msg : "");
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s HOSTS_FILE PORT USER KEY_FILE N [COMMAND]\n", argv[0]);
    return 2;
  }
  std::vector<std::string> hosts;
  {
    std::ifstream in(argv[1]);
    std::string h;
    while (in >> h) hosts.push_back(h);
  }
  const int port = std::atoi(argv[2]);
  const std::string user = argv[3];
  const std::string key = argv[4];
  const int n = std::atoi(argv[5]);
  const std::string command = argc > 6 ? argv[6] : "cat";
  if (n < 1 || static_cast<std::size_t>(n) > hosts.size()) return fail("N out of range", nullptr);
  libssh2_init(0);

  struct Conn {
    int fd;
    LIBSSH2_SESSION* s;
    LIBSSH2_CHANNEL* ch;
  };
  std::vector<Conn> conns;
  conns.reserve(static_cast<std::size_t>(n));
  // One connection first, so that what is made once (OpenSSL's tables, the
  // stdio buffers) is not counted per connection.
  long long heap0 = 0;
  long long rss0 = 0;
  long long lib0 = 0;
  long long session_struct = 0;
  long long peak_during_one = 0;
  for (int i = 0; i < n; ++i) {
    if (i == 1) {
      heap0 = heap_bytes();
      rss0 = rss_kib();
      lib0 = live_bytes;
    }
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    ::inet_pton(AF_INET, hosts[static_cast<std::size_t>(i)].c_str(), &a.sin_addr);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      return fail("connect", nullptr);
    }
    const long long before = live_bytes;
    peak_bytes = live_bytes;
    first_alloc = -1;
    LIBSSH2_SESSION* s = libssh2_session_init_ex(count_alloc, count_free, count_realloc, nullptr);
    session_struct = first_alloc;
    if (libssh2_session_handshake(s, fd) != 0) return fail("handshake", s);
    if (libssh2_userauth_publickey_fromfile_ex(s, user.c_str(), static_cast<unsigned>(user.size()),
                                               nullptr, key.c_str(), nullptr) != 0) {
      return fail("auth", s);
    }
    LIBSSH2_CHANNEL* ch = libssh2_channel_open_session(s);
    if (ch == nullptr) return fail("channel", s);
    if (libssh2_channel_exec(ch, command.c_str()) != 0) return fail("exec", s);
    peak_during_one = std::max(peak_during_one, peak_bytes - before);
    conns.push_back({fd, s, ch});
  }
  const double k = n > 1 ? static_cast<double>(n - 1) : 1.0;
  std::printf("connections: %d (the first one not counted)\n", n);
  std::printf("libssh2 session structure (its first allocation): %lld bytes\n", session_struct);
  std::printf("libssh2 live per connection: %.0f bytes\n",
              static_cast<double>(live_bytes - lib0) / k);
  std::printf("libssh2 peak while one connection is made: %lld bytes\n", peak_during_one);
  std::printf("heap per connection (mallinfo2, libssh2 + OpenSSL + malloc's own): %.0f bytes\n",
              static_cast<double>(heap_bytes() - heap0) / k);
  std::printf("resident per connection (VmRSS): %.0f bytes\n",
              static_cast<double>(rss_kib() - rss0) * 1024.0 / k);
  for (auto& c : conns) {
    libssh2_channel_free(c.ch);
    libssh2_session_disconnect(c.s, "done");
    libssh2_session_free(c.s);
    ::close(c.fd);
  }
  libssh2_exit();
  return 0;
}
