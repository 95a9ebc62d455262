// --container-* (docs/containers.md): every node's ranks in one container of
// the user's image. The names are pyxis's where it has one.
#pragma once

#include <CLI/CLI.hpp>

#include "cli/options.h"

namespace dlaunch {

// Adds the "Containers" section of --help.
void add_container_options(CLI::App& app, Options& o);
// After parsing: o.container complete and checked; throws InputError naming
// the option that is wrong (exit 2, nothing started).
void finish_container_options(const CLI::App& app, Options& o);

}  // namespace dlaunch
