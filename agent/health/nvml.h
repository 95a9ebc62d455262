// The GPUs of a node through NVML, loaded at run time (dlopen of
// libnvidia-ml.so.1, as nvidia-smi finds it): a node without the driver
// reports that, and the agent needs nothing of NVIDIA's to build or start.
#pragma once

#include "health/node_health.h"

namespace dlaunch::agent::health {

// Adds health.nvml (loaded, or why not) and, when loaded, health.gpu_count,
// health.gpu_driver, health.gpu_cuda and per GPU I health.gpu.I.{name,
// temp_c, ecc_volatile_uncorrected, ecc_aggregate_uncorrected,
// retired_pending, remap_pending, remap_failed, throttle, persistence};
// "n/a" where the GPU does not support a query.
void add_nvml_facts(Facts& facts);

}  // namespace dlaunch::agent::health
