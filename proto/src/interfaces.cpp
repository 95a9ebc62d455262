#include "dlaunch/proto/interfaces.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <bitset>
#include <string>
#include <utility>

#include "dlaunch/unique_fd.h"

namespace dlaunch::proto {

namespace {

std::uint8_t prefix_length(const sockaddr* mask) {
  if (mask == nullptr) return 0;
  std::size_t bits = 0;
  if (mask->sa_family == AF_INET) {
    bits = std::bitset<32>(reinterpret_cast<const sockaddr_in*>(mask)->sin_addr.s_addr).count();
  } else if (mask->sa_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6*>(mask)->sin6_addr;
    for (unsigned char byte : a.s6_addr) bits += std::bitset<8>(byte).count();
  }
  return static_cast<std::uint8_t>(bits);
}

}  // namespace

std::vector<Interface> list_interfaces() {
  std::vector<Interface> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (const ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    const int family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    Interface e;
    e.name = i->ifa_name != nullptr ? i->ifa_name : "";
    e.address = numeric_address(i->ifa_addr);
    e.prefix_len = prefix_length(i->ifa_netmask);
    e.family = family == AF_INET ? AddressFamily::kIpv4 : AddressFamily::kIpv6;
    // Administratively up: a bridge without ports has no carrier, yet its
    // address is the machine's and answers through any other interface.
    e.up = (i->ifa_flags & IFF_UP) != 0;
    e.loopback = (i->ifa_flags & IFF_LOOPBACK) != 0;
    if (!e.address.empty()) out.push_back(std::move(e));
  }
  ::freeifaddrs(list);
  return out;
}

std::string numeric_address(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof buf);
  } else if (sa->sa_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof buf);
  }
  return buf;
}

std::string source_address_toward(const std::string& address) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* ai = nullptr;
  if (::getaddrinfo(address.c_str(), "9", &hints, &ai) != 0 || ai == nullptr) return {};
  std::string source;
  UniqueFd fd(::socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (fd && ::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) == 0) {
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &len) == 0)
      source = numeric_address(reinterpret_cast<const sockaddr*>(&local));
  }
  ::freeaddrinfo(ai);
  return source;
}

bool same_interfaces(const std::vector<Interface>& a, const std::vector<Interface>& b) {
  if (a.size() != b.size()) return false;
  const auto keys = [](const std::vector<Interface>& list) {
    std::vector<std::pair<std::string, std::string>> out;
    out.reserve(list.size());
    for (const auto& i : list) out.emplace_back(i.name, i.address);
    std::sort(out.begin(), out.end());
    return out;
  };
  return keys(a) == keys(b);
}

}  // namespace dlaunch::proto
