// This machine's interface addresses, as an agent lists them in Ready: the
// head lists its own the same way to tell which agents share its machine.
#pragma once

#include <sys/socket.h>

#include <string>
#include <vector>

#include "dlaunch/proto/protocol.h"

namespace dlaunch::proto {

// Every address of every interface (getifaddrs), IPv4 and IPv6, in the order
// the system lists them; IPv6 addresses without their scope. Empty when the
// system will not say.
std::vector<Interface> list_interfaces();

// The numeric form of an IPv4 or IPv6 socket address, without an IPv6
// scope; empty for other families.
std::string numeric_address(const sockaddr* sa);

// The address this machine sends from toward a numeric address (the source
// its route picks: connect(2) on a UDP socket sends nothing), or empty.
std::string source_address_toward(const std::string& address);

// Whether two lists name the same interfaces with the same addresses (in any
// order; flags are not compared): the same machine, or at least the same
// network namespace.
bool same_interfaces(const std::vector<Interface>& a, const std::vector<Interface>& b);

}  // namespace dlaunch::proto
