/* A stand-in for the NVIDIA driver's libnvidia-ml.so.1 on machines without a
 * GPU (tests/integration/health_test.cpp): the NVML calls dlaunch-agent
 * --health makes (agent/health/nvml.cpp), answering what FAKE_NVML says.
 * A test double for hardware this machine lacks; the real library's path is
 * the same code, run on a real GPU where one is lent.
 *
 * FAKE_NVML: comma-separated settings, KEY=VALUE for every GPU or
 * I.KEY=VALUE for GPU I: gpus (count, default 1), driver (535.104.05), cuda
 * (12020), temp (40), ecc_volatile, ecc_aggregate, retired_pending,
 * remap_pending, remap_failed, throttle (a bit mask), persistence (1), and
 * unsupported=KEY (that query answers NVML_ERROR_NOT_SUPPORTED). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_settings.h"

typedef int nvmlReturn_t;
typedef void* nvmlDevice_t;

enum { kSuccess = 0, kInvalidArgument = 2, kNotSupported = 3, kMaxGpus = 16 };

static long long setting(int gpu, const char* key, long long fallback) {
  return fake_setting("FAKE_NVML", gpu, key, fallback);
}

static int unsupported(const char* key) {
  const char* env = getenv("FAKE_NVML");
  char pattern[64];
  snprintf(pattern, sizeof pattern, "unsupported=%s", key);
  return env != NULL && strstr(env, pattern) != NULL;
}

static int index_of(nvmlDevice_t d) { return (int)(long)d - 1; }

nvmlReturn_t nvmlInit_v2(void) { return kSuccess; }
nvmlReturn_t nvmlShutdown(void) { return kSuccess; }
const char* nvmlErrorString(nvmlReturn_t r) {
  return r == kNotSupported      ? "Not Supported"
         : r == kInvalidArgument ? "Invalid Argument"
                                 : "Unknown Error";
}
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* count) {
  *count = (unsigned)setting(-1, "gpus", 1);
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t* d) {
  if (i >= (unsigned)setting(-1, "gpus", 1) || i >= kMaxGpus) return kInvalidArgument;
  *d = (nvmlDevice_t)(long)(i + 1);
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char* name, unsigned size) {
  snprintf(name, size, "Fake GPU %d", index_of(d));
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned* t) {
  (void)sensor;
  if (unsupported("temp")) return kNotSupported;
  *t = (unsigned)setting(index_of(d), "temp", 40);
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, int type, int counter,
                                         unsigned long long* n) {
  (void)type;
  if (unsupported("ecc")) return kNotSupported;
  *n = (unsigned long long)setting(index_of(d), counter == 0 ? "ecc_volatile" : "ecc_aggregate", 0);
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t d, int* pending) {
  if (unsupported("retired")) return kNotSupported;
  *pending = (int)setting(index_of(d), "retired_pending", 0);
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t d, unsigned* corr, unsigned* unc,
                                       unsigned* pending, unsigned* failed) {
  if (unsupported("remap")) return kNotSupported;
  *corr = 0;
  *unc = 0;
  *pending = (unsigned)setting(index_of(d), "remap_pending", 0);
  *failed = (unsigned)setting(index_of(d), "remap_failed", 0);
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d, unsigned long long* r) {
  *r = (unsigned long long)setting(index_of(d), "throttle", 0);
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t d, int* mode) {
  *mode = (int)setting(index_of(d), "persistence", 1);
  return kSuccess;
}
nvmlReturn_t nvmlSystemGetDriverVersion(char* v, unsigned size) {
  const char* env = getenv("FAKE_NVML_DRIVER");
  snprintf(v, size, "%s", env != NULL ? env : "535.104.05");
  return kSuccess;
}
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* v) {
  *v = (int)setting(-1, "cuda", 12020);
  return kSuccess;
}
