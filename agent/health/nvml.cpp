#include "health/nvml.h"

#include <dlfcn.h>

#include <memory>
#include <string>

#include "health/dl_bind.h"

namespace dlaunch::agent::health {
namespace {

// NVML's C interface, as far as the checks use it (nvml.h, stable since
// driver 450; the _v2 entry points since 418).
using Ret = int;  // nvmlReturn_t: 0 success, 3 not supported
using Device = void*;
constexpr Ret kSuccess = 0;
constexpr Ret kNotSupported = 3;
constexpr int kTemperatureGpu = 0;     // NVML_TEMPERATURE_GPU
constexpr int kUncorrected = 1;        // NVML_MEMORY_ERROR_TYPE_UNCORRECTED
constexpr int kVolatileEcc = 0;        // NVML_VOLATILE_ECC
constexpr int kAggregateEcc = 1;       // NVML_AGGREGATE_ECC
constexpr unsigned kNameSize = 96;     // NVML_DEVICE_NAME_V2_BUFFER_SIZE
constexpr unsigned kVersionSize = 80;  // NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE

struct Api {
  Ret (*init)();
  Ret (*shutdown)();
  const char* (*error_string)(Ret);
  Ret (*count)(unsigned*);
  Ret (*handle)(unsigned, Device*);
  Ret (*name)(Device, char*, unsigned);
  Ret (*temperature)(Device, int, unsigned*);
  Ret (*ecc)(Device, int, int, unsigned long long*);
  Ret (*retired_pending)(Device, int*);
  Ret (*remapped_rows)(Device, unsigned*, unsigned*, unsigned*, unsigned*);
  Ret (*throttle)(Device, unsigned long long*);
  Ret (*persistence)(Device, int*);
  Ret (*driver_version)(char*, unsigned);
  Ret (*cuda_version)(int*);
};

// The clock event reasons that mean the GPU runs slower than it should
// (nvmlClocksEventReasons: idle, application clocks, the software power cap,
// sync boost and display clocks are normal).
std::string throttle_names(unsigned long long bits) {
  struct Reason {
    unsigned long long bit;
    const char* name;
  };
  static constexpr Reason kBad[] = {
      {0x8, "hw_slowdown"}, {0x20, "sw_thermal"}, {0x40, "hw_thermal"}, {0x80, "hw_power_brake"}};
  std::string out;
  for (const auto& r : kBad) {
    if ((bits & r.bit) != 0) out += (out.empty() ? "" : ",") + std::string(r.name);
  }
  return out.empty() ? "none" : out;
}

// A query's answer, "n/a" where the GPU does not support it, or the error.
template <typename T, typename Show>
std::string answer(const Api& api, Ret r, const T& value, Show show) {
  if (r == kSuccess) return show(value);
  if (r == kNotSupported) return "n/a";
  return std::string("error: ") + api.error_string(r);
}

}  // namespace

void add_nvml_facts(Facts& facts) {
  // Closed on every way out.
  const std::unique_ptr<void, int (*)(void*)> handle(
      ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL), ::dlclose);
  void* lib = handle.get();
  if (lib == nullptr) {
    const char* why = ::dlerror();
    facts.emplace_back("nvml", std::string("not loaded: ") + (why != nullptr ? why : "?"));
    return;
  }
  Api api{};
  const bool bound =
      bind_symbol(lib, "nvmlInit_v2", api.init) && bind_symbol(lib, "nvmlShutdown", api.shutdown) &&
      bind_symbol(lib, "nvmlErrorString", api.error_string) &&
      bind_symbol(lib, "nvmlDeviceGetCount_v2", api.count) &&
      bind_symbol(lib, "nvmlDeviceGetHandleByIndex_v2", api.handle) &&
      bind_symbol(lib, "nvmlDeviceGetName", api.name) &&
      bind_symbol(lib, "nvmlDeviceGetTemperature", api.temperature) &&
      bind_symbol(lib, "nvmlDeviceGetTotalEccErrors", api.ecc) &&
      bind_symbol(lib, "nvmlDeviceGetRetiredPagesPendingStatus", api.retired_pending) &&
      bind_symbol(lib, "nvmlDeviceGetRemappedRows", api.remapped_rows) &&
      bind_symbol(lib, "nvmlDeviceGetCurrentClocksThrottleReasons", api.throttle) &&
      bind_symbol(lib, "nvmlDeviceGetPersistenceMode", api.persistence) &&
      bind_symbol(lib, "nvmlSystemGetDriverVersion", api.driver_version) &&
      bind_symbol(lib, "nvmlSystemGetCudaDriverVersion", api.cuda_version);
  if (!bound) {
    facts.emplace_back("nvml",
                       "not loaded: libnvidia-ml.so.1 lacks a function the checks use "
                       "(a driver older than 450?)");
    return;
  }
  if (const Ret r = api.init(); r != kSuccess) {
    facts.emplace_back("nvml", std::string("not initialised: ") + api.error_string(r));
    return;
  }
  facts.emplace_back("nvml", "loaded");
  unsigned count = 0;
  if (const Ret r = api.count(&count); r != kSuccess) {
    facts.emplace_back("gpu_count", std::string("error: ") + api.error_string(r));
    count = 0;
  } else {
    facts.emplace_back("gpu_count", std::to_string(count));
  }
  char version[kVersionSize] = {};
  facts.emplace_back("gpu_driver", answer(api, api.driver_version(version, kVersionSize), version,
                                          [](const char* v) { return std::string(v); }));
  int cuda = 0;
  facts.emplace_back("gpu_cuda", answer(api, api.cuda_version(&cuda), cuda, [](int v) {
                       return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
                     }));
  const auto number = [](auto v) { return std::to_string(v); };
  for (unsigned i = 0; i < count; ++i) {
    const std::string key = "gpu." + std::to_string(i) + ".";
    Device dev = nullptr;
    if (const Ret r = api.handle(i, &dev); r != kSuccess) {
      facts.emplace_back(key + "error", api.error_string(r));
      continue;
    }
    char name[kNameSize] = {};
    facts.emplace_back(key + "name", answer(api, api.name(dev, name, kNameSize), name,
                                            [](const char* v) { return std::string(v); }));
    unsigned temp = 0;
    facts.emplace_back(key + "temp_c",
                       answer(api, api.temperature(dev, kTemperatureGpu, &temp), temp, number));
    unsigned long long ecc = 0;
    facts.emplace_back(key + "ecc_volatile_uncorrected",
                       answer(api, api.ecc(dev, kUncorrected, kVolatileEcc, &ecc), ecc, number));
    ecc = 0;
    facts.emplace_back(key + "ecc_aggregate_uncorrected",
                       answer(api, api.ecc(dev, kUncorrected, kAggregateEcc, &ecc), ecc, number));
    int pending = 0;
    facts.emplace_back(key + "retired_pending",
                       answer(api, api.retired_pending(dev, &pending), pending, number));
    unsigned corr = 0;
    unsigned unc = 0;
    unsigned remap_pending = 0;
    unsigned failed = 0;
    const Ret rows = api.remapped_rows(dev, &corr, &unc, &remap_pending, &failed);
    facts.emplace_back(key + "remap_pending", answer(api, rows, remap_pending, number));
    facts.emplace_back(key + "remap_failed", answer(api, rows, failed, number));
    unsigned long long reasons = 0;
    facts.emplace_back(key + "throttle",
                       answer(api, api.throttle(dev, &reasons), reasons, throttle_names));
    int persistence = 0;
    facts.emplace_back(key + "persistence",
                       answer(api, api.persistence(dev, &persistence), persistence,
                              [](int v) { return std::string(v != 0 ? "on" : "off"); }));
  }
  api.shutdown();
}

}  // namespace dlaunch::agent::health
