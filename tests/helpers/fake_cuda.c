/* A stand-in for the NVIDIA driver's libcuda.so.1 on machines without a GPU
 * (tests/integration/health_test.cpp): the CUDA driver calls of dlaunch's GPU
 * test (agent/health/gpu_test.cpp), with "device memory" in the host's and
 * the test's three kernels done here in C, answering what FAKE_CUDA says. A
 * test double for hardware this machine lacks: it checks what the agent does
 * with the answers (the arguments, the two passes, the figures, the errors,
 * a hung GPU); the kernels' PTX itself runs only on a real GPU.
 *
 * FAKE_CUDA: comma-separated settings, KEY=VALUE for every device or
 * I.KEY=VALUE for device I: gpus (count, default 1), init (a CUresult cuInit
 * returns), free_mb (256), gbps (memory read bandwidth, 1000), bad_words
 * (words the check reads back wrong, each pass), compute_wrong (threads of
 * the compute kernel with a wrong result), launch_error (a CUresult every
 * launch returns), hang (1: synchronizing never returns; the process's pid
 * is written to FAKE_CUDA_PIDFILE first, where that is set). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_settings.h"

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

enum { kSuccess = 0, kInvalidValue = 1, kOutOfMemory = 2, kMaxDevices = 16 };

static long long setting(int dev, const char* key, long long fallback) {
  return fake_setting("FAKE_CUDA", dev, key, fallback);
}

static int current = -1;      /* the device of the current context */
static double last_bytes = 0; /* what the last check kernel read */
static double event_time = 0; /* ms, advanced by check kernels */

static void hang_if_asked(void) {
  if (setting(current, "hang", 0) != 0) {
    /* Where the test looks for the hung process afterwards. */
    const char* pidfile = getenv("FAKE_CUDA_PIDFILE");
    FILE* f = pidfile != NULL ? fopen(pidfile, "w") : NULL;
    if (f != NULL) {
      fprintf(f, "%d\n", (int)getpid());
      fclose(f);
    }
    for (;;) pause();
  }
}

CUresult cuInit(unsigned flags) {
  (void)flags;
  return (CUresult)setting(-1, "init", 0);
}
CUresult cuGetErrorString(CUresult r, const char** out) {
  *out = r == 100   ? "no CUDA-capable device is detected"
         : r == 719 ? "unspecified launch failure"
         : r == 2   ? "out of memory"
                    : "fake error";
  return kSuccess;
}
CUresult cuDeviceGetCount(int* n) {
  *n = (int)setting(-1, "gpus", 1);
  return kSuccess;
}
CUresult cuDeviceGet(int* dev, int ordinal) {
  if (ordinal < 0 || ordinal >= setting(-1, "gpus", 1) || ordinal >= kMaxDevices)
    return kInvalidValue;
  *dev = ordinal;
  return kSuccess;
}
CUresult cuDeviceGetName(char* name, int len, int dev) {
  snprintf(name, (size_t)len, "Fake GPU %d", dev);
  return kSuccess;
}
CUresult cuDeviceGetPCIBusId(char* id, int len, int dev) {
  snprintf(id, (size_t)len, "0000:%02x:00.0", 0x10 + dev);
  return kSuccess;
}
CUresult cuDevicePrimaryCtxRetain(void** ctx, int dev) {
  *ctx = (void*)(intptr_t)(dev + 1);
  return kSuccess;
}
CUresult cuDevicePrimaryCtxRelease_v2(int dev) {
  (void)dev;
  return kSuccess;
}
CUresult cuCtxSetCurrent(void* ctx) {
  current = (int)(intptr_t)ctx - 1;
  return kSuccess;
}
CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
  *free_bytes = (size_t)setting(current, "free_mb", 256) << 20;
  *total = *free_bytes * 2;
  return kSuccess;
}
CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t bytes) {
  void* mem = malloc(bytes);
  if (mem == NULL) return kOutOfMemory;
  *p = (CUdeviceptr)(uintptr_t)mem;
  return kSuccess;
}
CUresult cuMemFree_v2(CUdeviceptr p) {
  free((void*)(uintptr_t)p);
  return kSuccess;
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t bytes) {
  memcpy((void*)(uintptr_t)dst, src, bytes);
  return kSuccess;
}
CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t bytes) {
  hang_if_asked();
  memcpy(dst, (const void*)(uintptr_t)src, bytes);
  return kSuccess;
}
CUresult cuModuleLoadData(void** module, const void* image) {
  /* The agent's PTX names its kernels; a module without them is refused as
   * the driver would (CUDA_ERROR_INVALID_PTX). */
  const char* ptx = (const char*)image;
  if (strstr(ptx, ".entry dl_fill") == NULL || strstr(ptx, ".entry dl_check") == NULL ||
      strstr(ptx, ".entry dl_compute") == NULL)
    return 218;
  *module = (void*)1;
  return kSuccess;
}
CUresult cuModuleUnload(void* module) {
  (void)module;
  return kSuccess;
}
enum { kFill = 1, kCheck = 2, kCompute = 3 };
CUresult cuModuleGetFunction(void** f, void* module, const char* name) {
  (void)module;
  intptr_t which = strcmp(name, "dl_fill") == 0      ? kFill
                   : strcmp(name, "dl_check") == 0   ? kCheck
                   : strcmp(name, "dl_compute") == 0 ? kCompute
                                                     : 0;
  if (which == 0) return 500; /* CUDA_ERROR_NOT_FOUND */
  *f = (void*)which;
  return kSuccess;
}

static uint32_t pattern(uint64_t i, uint32_t seed) { return (uint32_t)i * 0x9E3779B1u + seed; }

CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shared, void* stream, void** args, void** extra) {
  (void)gy, (void)gz, (void)by, (void)bz, (void)shared, (void)stream, (void)extra;
  const long long error = setting(current, "launch_error", 0);
  if (error != 0) return (CUresult)error;
  switch ((intptr_t)f) {
    case kFill: {
      uint32_t* buf = (uint32_t*)(uintptr_t) * (CUdeviceptr*)args[0];
      const uint64_t n = *(uint64_t*)args[1];
      const uint32_t seed = *(uint32_t*)args[2];
      for (uint64_t i = 0; i < n; ++i) buf[i] = pattern(i, seed);
      /* Bad cells: a stuck bit in every 4099th word, as many as asked. */
      const long long bad = setting(current, "bad_words", 0);
      for (long long k = 0; k < bad && (uint64_t)(k + 1) * 4099 < n; ++k)
        buf[(k + 1) * 4099] ^= 0x10u;
      return kSuccess;
    }
    case kCheck: {
      const uint32_t* buf = (const uint32_t*)(uintptr_t) * (CUdeviceptr*)args[0];
      const uint64_t n = *(uint64_t*)args[1];
      const uint32_t seed = *(uint32_t*)args[2];
      uint64_t* out = (uint64_t*)(uintptr_t) * (CUdeviceptr*)args[3];
      for (uint64_t i = 0; i < n; ++i) {
        if (buf[i] == pattern(i, seed)) continue;
        out[0] += 1;
        if (i < out[1]) out[1] = i;
      }
      last_bytes = (double)n * 4;
      event_time += last_bytes / ((double)setting(current, "gbps", 1000) * 1e6);
      return kSuccess;
    }
    case kCompute: {
      uint32_t* out = (uint32_t*)(uintptr_t) * (CUdeviceptr*)args[0];
      const uint32_t iters = *(uint32_t*)args[1];
      const unsigned threads = gx * bx;
      for (unsigned t = 0; t < threads; ++t) {
        uint32_t x = t;
        float v = (float)(t & 1023u);
        for (uint32_t k = 0; k < iters; ++k) {
          x = x * 1664525u + 1013904223u;
          v = __builtin_fmaf(v, 0.999f, 0.5f);
        }
        out[2 * t] = x;
        memcpy(&out[2 * t + 1], &v, 4);
      }
      const long long wrong = setting(current, "compute_wrong", 0);
      for (long long k = 0; k < wrong && k < threads; ++k) out[2 * (threads - 1 - k)] ^= 1u;
      return kSuccess;
    }
    default:
      return kInvalidValue;
  }
}
CUresult cuCtxSynchronize(void) {
  hang_if_asked();
  return kSuccess;
}
CUresult cuEventCreate(void** e, unsigned flags) {
  (void)flags;
  *e = malloc(sizeof(double));
  return *e == NULL ? kOutOfMemory : kSuccess;
}
CUresult cuEventRecord(void* e, void* stream) {
  (void)stream;
  *(double*)e = event_time;
  return kSuccess;
}
CUresult cuEventSynchronize(void* e) {
  (void)e;
  hang_if_asked();
  return kSuccess;
}
CUresult cuEventElapsedTime(float* ms, void* start, void* stop) {
  *ms = (float)(*(double*)stop - *(double*)start);
  return kSuccess;
}
CUresult cuEventDestroy_v2(void* e) {
  free(e);
  return kSuccess;
}
