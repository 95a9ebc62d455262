// A GPU compute and memory test through the CUDA driver (libcuda.so.1,
// loaded at run time: the agent needs nothing of NVIDIA's to build or start),
// for `dlaunch --check` (docs/health.md, "The GPU test"). Each CUDA device
// gets three small kernels of our own, given to the driver as PTX (it
// compiles them for the device):
//
// - fill and check: a buffer of the device's memory is written with a
//   pattern that differs at every word, then read back on the device and
//   compared, twice (the pattern and its complement, so that every bit is
//   seen at 0 and at 1); the read is timed, which gives the memory's read
//   bandwidth;
// - compute: every thread runs an integer recurrence and a chain of fused
//   multiply-adds, whose exact results the host computes too (IEEE 754's fma
//   is correctly rounded on both sides).
//
// Run in a child process of the agent (`dlaunch-agent --gpu-test MB`), with a
// deadline: a GPU that hangs a kernel, or a driver that hangs cuInit, holds
// up that child, never the agent.
#pragma once

#include <cstddef>

#include "health/node_health.h"

namespace dlaunch::agent::health {

// The facts (without "health."): cuda (loaded, or why not), cuda_count, and
// per CUDA device I (in PCI bus order when CUDA_DEVICE_ORDER=PCI_BUS_ID, as
// the agent runs it: NVML's order) cuda.I.{name,pci,memtest,mem_mb,
// mem_gbps,compute}; memtest and compute are "ok", what was wrong, or
// "error: CALL: WHY". `mb`: how much memory to test per device (at most half
// of what is free).
Facts run_gpu_test(std::size_t mb);

// The kernels' PTX text (tests compile it with ptxas where the CUDA toolkit
// is installed).
const char* gpu_test_ptx();

// What the compute kernel's thread `t` leaves after `iters` rounds: the
// integer and the float's bits. The host's copy of the kernel's arithmetic.
struct ComputeResult {
  unsigned integer = 0;
  unsigned float_bits = 0;
};
ComputeResult expected_compute(unsigned t, unsigned iters);

// The pattern the fill kernel writes at word `index` with `seed`.
unsigned fill_pattern(unsigned long long index, unsigned seed);

}  // namespace dlaunch::agent::health
