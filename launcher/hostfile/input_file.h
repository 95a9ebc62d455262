// read_input_file (hostfile.h) in two steps, for callers that check the file
// before reading it (the ssh config's owner and mode): the check sees the
// file that is then read, not the path again, so a path swapped in between
// (a flipped symbolic link) cannot slip past it.
#pragma once

#include <sys/stat.h>

#include <string>

#include "dlaunch/unique_fd.h"

namespace dlaunch {

struct OpenedInput {
  UniqueFd fd;        // O_PATH; invalid: `error` says why (ENOENT: no such file)
  struct stat st {};  // of fd
  int error = 0;
};

// Opens without reading (no FIFO waits, no device acts) and fstats.
OpenedInput open_input_file(const std::string& path, const std::string& field);

// read_input_file's checks and read, on that same file; throws InputError.
std::string read_opened_input(const OpenedInput& in, const std::string& path,
                              const std::string& field);

}  // namespace dlaunch
