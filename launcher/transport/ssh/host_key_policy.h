// How host keys are checked (--host-key-check, StrictHostKeyChecking), on its
// own so that the command line can name it without libssh2's header.
#pragma once

namespace dlaunch::ssh {

enum class HostKeyPolicy { kStrict, kAcceptNew, kOff };

}  // namespace dlaunch::ssh
