#include "health/gpu_test.h"

#include <dlfcn.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "health/dl_bind.h"

namespace dlaunch::agent::health {
namespace {

// The CUDA driver's C interface, as far as the test uses it (cuda.h; every
// entry point here exists since driver 450 / CUDA 11.0).
using CuResult = int;  // CUresult: 0 success
using CuDevice = int;
using Context = void*;
using Module = void*;
using Function = void*;
using Event = void*;
using Stream = void*;
using DevicePtr = unsigned long long;
constexpr CuResult kCuSuccess = 0;

struct CudaApi {
  CuResult (*init)(unsigned);
  CuResult (*error_string)(CuResult, const char**);
  CuResult (*count)(int*);
  CuResult (*device)(CuDevice*, int);
  CuResult (*name)(char*, int, CuDevice);
  CuResult (*pci_bus_id)(char*, int, CuDevice);
  CuResult (*retain)(Context*, CuDevice);
  CuResult (*release)(CuDevice);
  CuResult (*set_current)(Context);
  CuResult (*mem_info)(std::size_t*, std::size_t*);
  CuResult (*alloc)(DevicePtr*, std::size_t);
  CuResult (*free)(DevicePtr);
  CuResult (*to_device)(DevicePtr, const void*, std::size_t);
  CuResult (*to_host)(void*, DevicePtr, std::size_t);
  CuResult (*load)(Module*, const void*);
  CuResult (*unload)(Module);
  CuResult (*function)(Function*, Module, const char*);
  CuResult (*launch)(Function, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                     Stream, void**, void**);
  CuResult (*synchronize)();
  CuResult (*event_create)(Event*, unsigned);
  CuResult (*event_record)(Event, Stream);
  CuResult (*event_synchronize)(Event);
  CuResult (*event_elapsed)(float*, Event, Event);
  CuResult (*event_destroy)(Event);
};

// "error: CALL: the driver's words (CODE)".
std::string call_failed(const CudaApi& api, const char* what, CuResult r) {
  const char* why = nullptr;
  if (api.error_string(r, &why) != kCuSuccess || why == nullptr) why = "unknown error";
  return std::string("error: ") + what + ": " + why + " (" + std::to_string(r) + ")";
}

bool bind_cuda(void* lib, CudaApi& a) {
  return bind_symbol(lib, "cuInit", a.init) &&
         bind_symbol(lib, "cuGetErrorString", a.error_string) &&
         bind_symbol(lib, "cuDeviceGetCount", a.count) &&
         bind_symbol(lib, "cuDeviceGet", a.device) && bind_symbol(lib, "cuDeviceGetName", a.name) &&
         bind_symbol(lib, "cuDeviceGetPCIBusId", a.pci_bus_id) &&
         bind_symbol(lib, "cuDevicePrimaryCtxRetain", a.retain) &&
         bind_symbol(lib, "cuDevicePrimaryCtxRelease_v2", a.release) &&
         bind_symbol(lib, "cuCtxSetCurrent", a.set_current) &&
         bind_symbol(lib, "cuMemGetInfo_v2", a.mem_info) &&
         bind_symbol(lib, "cuMemAlloc_v2", a.alloc) && bind_symbol(lib, "cuMemFree_v2", a.free) &&
         bind_symbol(lib, "cuMemcpyHtoD_v2", a.to_device) &&
         bind_symbol(lib, "cuMemcpyDtoH_v2", a.to_host) &&
         bind_symbol(lib, "cuModuleLoadData", a.load) &&
         bind_symbol(lib, "cuModuleUnload", a.unload) &&
         bind_symbol(lib, "cuModuleGetFunction", a.function) &&
         bind_symbol(lib, "cuLaunchKernel", a.launch) &&
         bind_symbol(lib, "cuCtxSynchronize", a.synchronize) &&
         bind_symbol(lib, "cuEventCreate", a.event_create) &&
         bind_symbol(lib, "cuEventRecord", a.event_record) &&
         bind_symbol(lib, "cuEventSynchronize", a.event_synchronize) &&
         bind_symbol(lib, "cuEventElapsedTime", a.event_elapsed) &&
         bind_symbol(lib, "cuEventDestroy_v2", a.event_destroy);
}

// The kernels. Grid-stride loops over 64-bit indices; parameters in the
// order of their launches below.
//   dl_fill(u32* buf, u64 n, u32 seed):   buf[i] = lo32(i) * 0x9E3779B1 + seed
//   dl_check(u32* buf, u64 n, u32 seed, u64* out): out[0] (low 32 bits)
//       counts the words that differ, out[1] keeps the lowest such index
//   dl_compute(u32* out, u32 iters): thread t: x = t, f = t & 1023; iters
//       times x = x * 1664525 + 1013904223, f = fma(f, 0.999f, 0.5f);
//       out[2t] = x, out[2t+1] = bits of f
constexpr const char* kPtx = R"(.version 7.0
.target sm_70
.address_size 64

.visible .entry dl_fill(.param .u64 p_buf, .param .u64 p_n, .param .u32 p_seed)
{
  .reg .pred %p<2>;
  .reg .b32 %r<8>;
  .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [p_buf];
  cvta.to.global.u64 %rd1, %rd1;
  ld.param.u64 %rd2, [p_n];
  ld.param.u32 %r1, [p_seed];
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %tid.x;
  cvt.u64.u32 %rd4, %r4;
  mad.wide.u32 %rd3, %r2, %r3, %rd4;
  mov.u32 %r5, %nctaid.x;
  mul.wide.u32 %rd5, %r5, %r3;
FILL_LOOP:
  setp.ge.u64 %p1, %rd3, %rd2;
  @%p1 bra FILL_DONE;
  cvt.u32.u64 %r6, %rd3;
  mad.lo.u32 %r7, %r6, 0x9E3779B1, %r1;
  shl.b64 %rd6, %rd3, 2;
  add.u64 %rd7, %rd1, %rd6;
  st.global.u32 [%rd7], %r7;
  add.u64 %rd3, %rd3, %rd5;
  bra FILL_LOOP;
FILL_DONE:
  ret;
}

.visible .entry dl_check(.param .u64 p_buf, .param .u64 p_n, .param .u32 p_seed, .param .u64 p_out)
{
  .reg .pred %p<3>;
  .reg .b32 %r<10>;
  .reg .b64 %rd<12>;
  ld.param.u64 %rd1, [p_buf];
  cvta.to.global.u64 %rd1, %rd1;
  ld.param.u64 %rd2, [p_n];
  ld.param.u32 %r1, [p_seed];
  ld.param.u64 %rd8, [p_out];
  cvta.to.global.u64 %rd8, %rd8;
  add.u64 %rd9, %rd8, 8;
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %tid.x;
  cvt.u64.u32 %rd4, %r4;
  mad.wide.u32 %rd3, %r2, %r3, %rd4;
  mov.u32 %r5, %nctaid.x;
  mul.wide.u32 %rd5, %r5, %r3;
CHECK_LOOP:
  setp.ge.u64 %p1, %rd3, %rd2;
  @%p1 bra CHECK_DONE;
  cvt.u32.u64 %r6, %rd3;
  mad.lo.u32 %r7, %r6, 0x9E3779B1, %r1;
  shl.b64 %rd6, %rd3, 2;
  add.u64 %rd7, %rd1, %rd6;
  ld.global.cg.u32 %r8, [%rd7];
  setp.eq.u32 %p2, %r8, %r7;
  @%p2 bra CHECK_NEXT;
  atom.global.add.u32 %r9, [%rd8], 1;
  atom.global.min.u64 %rd10, [%rd9], %rd3;
CHECK_NEXT:
  add.u64 %rd3, %rd3, %rd5;
  bra CHECK_LOOP;
CHECK_DONE:
  ret;
}

.visible .entry dl_compute(.param .u64 p_out, .param .u32 p_iters)
{
  .reg .pred %p<2>;
  .reg .b32 %r<10>;
  .reg .f32 %f<2>;
  .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [p_out];
  cvta.to.global.u64 %rd1, %rd1;
  ld.param.u32 %r1, [p_iters];
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %tid.x;
  mad.lo.u32 %r5, %r2, %r3, %r4;
  mov.u32 %r6, %r5;
  and.b32 %r7, %r5, 1023;
  cvt.rn.f32.u32 %f1, %r7;
  mov.u32 %r8, 0;
COMPUTE_LOOP:
  setp.ge.u32 %p1, %r8, %r1;
  @%p1 bra COMPUTE_DONE;
  mad.lo.u32 %r6, %r6, 1664525, 1013904223;
  fma.rn.f32 %f1, %f1, 0f3F7FBE77, 0f3F000000;
  add.u32 %r8, %r8, 1;
  bra COMPUTE_LOOP;
COMPUTE_DONE:
  mul.wide.u32 %rd2, %r5, 8;
  add.u64 %rd3, %rd1, %rd2;
  mov.b32 %r9, %f1;
  st.global.v2.u32 [%rd3], {%r6, %r9};
  ret;
}
)";

constexpr unsigned kThreads = 256;        // per block
constexpr unsigned kFillBlocks = 1024;    // grid-stride over the buffer
constexpr unsigned kComputeBlocks = 128;  // 32,768 threads
constexpr unsigned kComputeIters = 2048;  // per thread
constexpr unsigned kSeed = 0x5A3C96E1U;   // and its complement, the second pass
constexpr float kFmaA = 0.999F;           // 0x3F7FBE77 in the PTX
constexpr float kFmaB = 0.5F;             // 0x3F000000

class DeviceTest final {
 public:
  DeviceTest(const CudaApi& api, int ordinal) : api_(api), ordinal_(ordinal) {}
  DeviceTest(const DeviceTest&) = delete;
  DeviceTest& operator=(const DeviceTest&) = delete;
  ~DeviceTest() {
    for (const DevicePtr p : buffers_) api_.free(p);
    for (Event e : events_) api_.event_destroy(e);
    if (module_ != nullptr) api_.unload(module_);
    if (retained_) api_.release(device_);
  }

  // Every fact of this device, into `facts` with `key` ("cuda.I.").
  void test(std::size_t mb, Facts& facts, const std::string& key) {
    std::string failed;
    if (!call(api_.device(&device_, ordinal_), "cuDeviceGet", failed)) {
      facts.emplace_back(key + "memtest", failed);
      return;
    }
    char text[256] = {};
    if (call(api_.name(text, sizeof text, device_), "cuDeviceGetName", failed))
      facts.emplace_back(key + "name", text);
    if (call(api_.pci_bus_id(text, sizeof text, device_), "cuDeviceGetPCIBusId", failed))
      facts.emplace_back(key + "pci", text);
    if (!setup(failed)) {
      facts.emplace_back(key + "memtest", failed);
      facts.emplace_back(key + "compute", failed);
      return;
    }
    memtest(mb, facts, key);
    facts.emplace_back(key + "compute", compute());
  }

 private:
  bool call(CuResult r, const char* what, std::string& failed) const {
    if (r == kCuSuccess) return true;
    failed = call_failed(api_, what, r);
    return false;
  }

  bool setup(std::string& failed) {
    Context ctx = nullptr;
    if (!call(api_.retain(&ctx, device_), "cuDevicePrimaryCtxRetain", failed)) return false;
    retained_ = true;
    return call(api_.set_current(ctx), "cuCtxSetCurrent", failed) &&
           call(api_.load(&module_, kPtx), "cuModuleLoadData", failed) &&
           call(api_.function(&fill_, module_, "dl_fill"), "cuModuleGetFunction", failed) &&
           call(api_.function(&check_, module_, "dl_check"), "cuModuleGetFunction", failed) &&
           call(api_.function(&compute_, module_, "dl_compute"), "cuModuleGetFunction", failed);
  }

  bool allocate(std::size_t bytes, DevicePtr& out, std::string& failed) {
    if (!call(api_.alloc(&out, bytes), "cuMemAlloc", failed)) return false;
    buffers_.push_back(out);
    return true;
  }

  bool event(Event& out, std::string& failed) {
    if (!call(api_.event_create(&out, 0), "cuEventCreate", failed)) return false;
    events_.push_back(out);
    return true;
  }

  void memtest(std::size_t mb, Facts& facts, const std::string& key) {
    std::string failed;
    std::size_t free_bytes = 0;
    std::size_t total = 0;
    if (!call(api_.mem_info(&free_bytes, &total), "cuMemGetInfo", failed)) {
      facts.emplace_back(key + "memtest", failed);
      return;
    }
    // At most half of what is free: another process may be using the GPU.
    const std::size_t bytes = std::min(mb << 20U, free_bytes / 2) & ~std::size_t{4095};
    unsigned long long words = bytes / 4;
    DevicePtr buf = 0;
    DevicePtr out = 0;
    Event start = nullptr;
    Event stop = nullptr;
    if (words == 0 || !allocate(bytes, buf, failed) || !allocate(16, out, failed) ||
        !event(start, failed) || !event(stop, failed)) {
      facts.emplace_back(key + "memtest", words == 0 ? "error: no free memory to test" : failed);
      return;
    }
    unsigned long long wrong = 0;
    unsigned long long first = ~0ULL;
    float best_ms = 0;
    for (const unsigned seed : {kSeed, ~kSeed}) {
      unsigned long long init[2] = {0, ~0ULL};
      unsigned seed_arg = seed;
      void* fill_args[] = {&buf, &words, &seed_arg};
      void* check_args[] = {&buf, &words, &seed_arg, &out};
      float ms = 0;
      if (!call(api_.to_device(out, init, sizeof init), "cuMemcpyHtoD", failed) ||
          !call(
              api_.launch(fill_, kFillBlocks, 1, 1, kThreads, 1, 1, 0, nullptr, fill_args, nullptr),
              "cuLaunchKernel(dl_fill)", failed) ||
          !call(api_.event_record(start, nullptr), "cuEventRecord", failed) ||
          !call(api_.launch(check_, kFillBlocks, 1, 1, kThreads, 1, 1, 0, nullptr, check_args,
                            nullptr),
                "cuLaunchKernel(dl_check)", failed) ||
          !call(api_.event_record(stop, nullptr), "cuEventRecord", failed) ||
          !call(api_.event_synchronize(stop), "cuEventSynchronize", failed) ||
          !call(api_.event_elapsed(&ms, start, stop), "cuEventElapsedTime", failed) ||
          !call(api_.to_host(init, out, sizeof init), "cuMemcpyDtoH", failed)) {
        facts.emplace_back(key + "memtest", failed);
        return;
      }
      wrong += init[0] & 0xFFFFFFFFULL;
      first = std::min(first, init[1]);
      if (ms > 0 && (best_ms == 0 || ms < best_ms)) best_ms = ms;
    }
    facts.emplace_back(key + "mem_mb", std::to_string(bytes >> 20U));
    if (best_ms > 0) {
      char gbps[32];
      std::snprintf(gbps, sizeof gbps, "%.1f", static_cast<double>(bytes) / (best_ms * 1e6));
      facts.emplace_back(key + "mem_gbps", gbps);
    }
    facts.emplace_back(key + "memtest",
                       wrong == 0 ? std::string("ok")
                                  : std::to_string(wrong) + " of " + std::to_string(2 * words) +
                                        " words read back wrong (the first at byte " +
                                        std::to_string(first * 4) + " of " +
                                        std::to_string(bytes >> 20U) + " MiB)");
  }

  std::string compute() {
    std::string failed;
    const unsigned threads = kComputeBlocks * kThreads;
    const std::size_t bytes = std::size_t{threads} * 8;
    DevicePtr out = 0;
    unsigned iters = kComputeIters;
    void* args[] = {&out, &iters};
    std::vector<unsigned> got(std::size_t{threads} * 2);
    if (!allocate(bytes, out, failed) ||
        !call(
            api_.launch(compute_, kComputeBlocks, 1, 1, kThreads, 1, 1, 0, nullptr, args, nullptr),
            "cuLaunchKernel(dl_compute)", failed) ||
        !call(api_.synchronize(), "cuCtxSynchronize", failed) ||
        !call(api_.to_host(got.data(), out, bytes), "cuMemcpyDtoH", failed)) {
      return failed;
    }
    unsigned wrong = 0;
    long long first = -1;
    for (unsigned t = 0; t < threads; ++t) {
      const ComputeResult want = expected_compute(t, iters);
      if (got[2 * t] == want.integer && got[2 * t + 1] == want.float_bits) continue;
      if (first < 0) first = t;
      ++wrong;
    }
    if (wrong == 0) return "ok";
    return std::to_string(wrong) + " of " + std::to_string(threads) +
           " threads computed wrong results (the first: thread " + std::to_string(first) + ")";
  }

  const CudaApi& api_;
  int ordinal_;
  CuDevice device_ = 0;
  bool retained_ = false;
  Module module_ = nullptr;
  Function fill_ = nullptr;
  Function check_ = nullptr;
  Function compute_ = nullptr;
  std::vector<DevicePtr> buffers_;
  std::vector<Event> events_;
};

}  // namespace

const char* gpu_test_ptx() { return kPtx; }

unsigned fill_pattern(unsigned long long index, unsigned seed) {
  return static_cast<unsigned>(index) * 0x9E3779B1U + seed;
}

ComputeResult expected_compute(unsigned t, unsigned iters) {
  unsigned x = t;
  auto f = static_cast<float>(t & 1023U);
  for (unsigned k = 0; k < iters; ++k) {
    x = x * 1664525U + 1013904223U;
    f = std::fma(f, kFmaA, kFmaB);
  }
  return {x, std::bit_cast<unsigned>(f)};
}

Facts run_gpu_test(std::size_t mb) {
  Facts facts;
  const std::unique_ptr<void, int (*)(void*)> handle(
      ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL), ::dlclose);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    facts.emplace_back("cuda", std::string("not loaded: ") + (why != nullptr ? why : "?"));
    return facts;
  }
  CudaApi api{};
  if (!bind_cuda(handle.get(), api)) {
    facts.emplace_back("cuda",
                       "not loaded: libcuda.so.1 lacks a function the test uses (a driver older "
                       "than 450?)");
    return facts;
  }
  if (const CuResult r = api.init(0); r != kCuSuccess) {
    facts.emplace_back("cuda", call_failed(api, "cuInit", r));
    return facts;
  }
  int count = 0;
  if (const CuResult r = api.count(&count); r != kCuSuccess) {
    facts.emplace_back("cuda", call_failed(api, "cuDeviceGetCount", r));
    return facts;
  }
  facts.emplace_back("cuda", "loaded");
  facts.emplace_back("cuda_count", std::to_string(count));
  for (int i = 0; i < count; ++i) {
    DeviceTest device(api, i);
    device.test(mb, facts, "cuda." + std::to_string(i) + ".");
  }
  return facts;
}

}  // namespace dlaunch::agent::health
