// SE_InitPlugin and the platform callbacks of the CUDA reference plugin:
// device count, device creation (properties, memory pool, internal streams)
// and the per-device queries.
#include <cstdio>
#include <cstring>
#include <new>

#include "cuda_common.h"
#include "launch_queue.h"
#include "pluggable_host_copy.h"
#include "pluggable_native_stream.h"
#include "staging.h"

namespace pgcuda {

// Defined in runtime.cu.
void fill_stream_executor(SP_StreamExecutor* se);
void memcpy_htod_consumed(const SP_Device* device, SP_Stream stream,
                          SP_DeviceMemoryBase* device_dst, const void* host_src, uint64_t size,
                          TF_Status* status);
void fill_timer_fns(SP_TimerFns* fns);

namespace {

// FP32 lanes per multiprocessor, used for the peak GFLOP/s estimate.
int fp32_lanes_per_sm(int major, int minor) {
  switch (major) {
    case 6:
      return minor == 0 ? 64 : 128;
    case 7:
      return 64;
    case 8:
      return minor == 0 ? 64 : 128;
    default:
      return 128;
  }
}

// Reads the NUMA node of a PCI device from sysfs; -1 when unknown.
int numa_node_of(const char* pci_bus_id) {
  char path[128];
  snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", pci_bus_id);
  FILE* f = fopen(path, "r");
  if (f == nullptr) return -1;
  int node = -1;
  if (fscanf(f, "%d", &node) != 1) node = -1;
  fclose(f);
  return node < 0 ? -1 : node;
}

void get_device_count(const SP_Platform*, int* device_count, TF_Status* status) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ||
      e == cudaErrorInitializationError || e == cudaErrorSystemDriverMismatch ||
      e == cudaErrorCompatNotSupportedOnDevice) {
    // No usable GPU or driver: load with no devices.
    (void)cudaGetLastError();
    *device_count = 0;
    return;
  }
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    *device_count = 0;
    set_cuda_status(status, e, "cudaGetDeviceCount");
    return;
  }
  *device_count = n;
}

// Reads one integer attribute; returns false and sets `status` on error.
bool read_attr(int* value, cudaDeviceAttr attr, const char* attr_name,
               int ordinal, TF_Status* status) {
  cudaError_t e = cudaDeviceGetAttribute(value, attr, ordinal);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    set_cuda_status(status, e, "cudaDeviceGetAttribute(%s, device %d)",
                    attr_name, ordinal);
    return false;
  }
  return true;
}

#define PG_READ_ATTR(var, attr) \
  read_attr(&(var), attr, #attr, ordinal, status)

// Releases what create_device made (safe on a partly made device).
void free_device(CudaDevice* dev) {
  if (dev == nullptr) return;
  DeviceGuard guard(dev->ordinal);
  if (dev->queue != nullptr) {
    register_queue(dev->ordinal, nullptr);
    delete dev->queue;  // issues what is left
    dev->queue = nullptr;
  }
  if (dev->alloc_stream != nullptr) {
    (void)cudaStreamSynchronize(dev->alloc_stream);
  }
  release_staging(dev);
  if (dev->pool != nullptr) (void)cudaMemPoolDestroy(dev->pool);
  if (dev->alloc_stream != nullptr) (void)cudaStreamDestroy(dev->alloc_stream);
  if (dev->sync_stream != nullptr) (void)cudaStreamDestroy(dev->sync_stream);
  (void)cudaGetLastError();
  delete dev;
}

// Creates the device's own stream-ordered memory pool and, where every other
// GPU can reach it, grants them access so cross-device copies work. Leaves
// `use_pool` false (plain cudaMalloc) when anything is missing.
void setup_pool(CudaDevice* dev, int device_count, TF_Status* status) {
  const int ordinal = dev->ordinal;
  int pools = 0;
  if (!PG_READ_ATTR(pools, cudaDevAttrMemoryPoolsSupported)) return;
  if (!pools) return;
  // Every peer must be able to access this device's memory, else copies
  // between pool memory of different devices are not guaranteed.
  for (int j = 0; j < device_count; ++j) {
    if (j == ordinal) continue;
    int can = 0;
    cudaError_t e = cudaDeviceCanAccessPeer(&can, j, ordinal);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    if (!can) return;
  }
  cudaMemPoolProps props;
  memset(&props, 0, sizeof(props));
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = ordinal;
  cudaError_t e = cudaMemPoolCreate(&dev->pool, &props);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    dev->pool = nullptr;
    return;  // fall back to cudaMalloc
  }
  // Keep freed memory in the pool (it is trimmed when an allocation fails).
  uint64_t threshold = UINT64_MAX;
  e = cudaMemPoolSetAttribute(dev->pool, cudaMemPoolAttrReleaseThreshold,
                              &threshold);
  if (e != cudaSuccess) {
    set_cuda_status(status, e, "cudaMemPoolSetAttribute(ReleaseThreshold)");
    return;
  }
  for (int j = 0; j < device_count; ++j) {
    if (j == ordinal) continue;
    cudaMemAccessDesc desc;
    memset(&desc, 0, sizeof(desc));
    desc.location.type = cudaMemLocationTypeDevice;
    desc.location.id = j;
    desc.flags = cudaMemAccessFlagsProtReadWrite;
    e = cudaMemPoolSetAccess(dev->pool, &desc, 1);
    if (e != cudaSuccess) {
      set_cuda_status(status, e, "cudaMemPoolSetAccess(pool of %d, device %d)",
                      ordinal, j);
      return;
    }
  }
  e = cudaStreamCreateWithFlags(&dev->alloc_stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    dev->alloc_stream = nullptr;
    set_cuda_status(status, e, "cudaStreamCreateWithFlags(allocation stream)");
    return;
  }
  dev->use_pool = true;
}

void create_device(const SP_Platform*, SE_CreateDeviceParams* params,
                   TF_Status* status) {
  const int ordinal = params->ordinal;
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || ordinal < 0 || ordinal >= count) {
    (void)cudaGetLastError();
    char msg[128];
    snprintf(msg, sizeof(msg), "no CUDA device with ordinal %d (%d present)",
             ordinal, count);
    TF_SetStatus(status, TF_INVALID_ARGUMENT, msg);
    return;
  }
  DeviceGuard guard(ordinal);
  if (!guard.ok(status, ordinal)) return;

  CudaDevice* dev = new (std::nothrow) CudaDevice();
  if (dev == nullptr) {
    TF_SetStatus(status, TF_RESOURCE_EXHAUSTED, "out of host memory");
    return;
  }
  dev->ordinal = ordinal;

  cudaDeviceProp prop;
  e = cudaGetDeviceProperties(&prop, ordinal);
  if (e != cudaSuccess) {
    set_cuda_status(status, e, "cudaGetDeviceProperties(%d)", ordinal);
    free_device(dev);
    return;
  }
  snprintf(dev->name, sizeof(dev->name), "%s", prop.name);
  dev->total_memory = static_cast<int64_t>(prop.totalGlobalMem);
  dev->l2_bytes = static_cast<int64_t>(prop.l2CacheSize);

  int domain = 0, bus = 0, slot = 0;
  bool ok = PG_READ_ATTR(dev->sm_count, cudaDevAttrMultiProcessorCount) &&
            PG_READ_ATTR(dev->clock_khz, cudaDevAttrClockRate) &&
            PG_READ_ATTR(dev->mem_clock_khz, cudaDevAttrMemoryClockRate) &&
            PG_READ_ATTR(dev->mem_bus_width_bits,
                         cudaDevAttrGlobalMemoryBusWidth) &&
            PG_READ_ATTR(dev->cc_major, cudaDevAttrComputeCapabilityMajor) &&
            PG_READ_ATTR(dev->cc_minor, cudaDevAttrComputeCapabilityMinor) &&
            PG_READ_ATTR(domain, cudaDevAttrPciDomainId) &&
            PG_READ_ATTR(bus, cudaDevAttrPciBusId) &&
            PG_READ_ATTR(slot, cudaDevAttrPciDeviceId);
  if (!ok) {
    free_device(dev);
    return;
  }
  if (dev->sm_count < 1) dev->sm_count = 1;
  snprintf(dev->pci_bus_id, sizeof(dev->pci_bus_id), "%04x:%02x:%02x.0",
           static_cast<unsigned>(domain), static_cast<unsigned>(bus),
           static_cast<unsigned>(slot));
  dev->numa_node = numa_node_of(dev->pci_bus_id);
  // Double data rate: two transfers per memory clock.
  dev->bandwidth_bytes_per_s = static_cast<int64_t>(dev->mem_clock_khz) *
                               1000 * 2 * (dev->mem_bus_width_bits / 8);
  // Fused multiply-add counts as two operations.
  dev->gflops = static_cast<double>(dev->sm_count) *
                fp32_lanes_per_sm(dev->cc_major, dev->cc_minor) * 2.0 *
                (dev->clock_khz / 1.0e6);

  setup_pool(dev, count, status);
  if (TF_GetCode(status) != TF_OK) {
    free_device(dev);
    return;
  }
  e = cudaStreamCreateWithFlags(&dev->sync_stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    dev->sync_stream = nullptr;
    set_cuda_status(status, e, "cudaStreamCreateWithFlags(copy stream)");
    free_device(dev);
    return;
  }

  if (launch_thread_enabled()) {
    dev->queue = new (std::nothrow) LaunchQueue(ordinal);  // null: launches at once
    if (dev->queue != nullptr) register_queue(ordinal, dev);
  }

  SP_Device* out = params->device;
  out->struct_size = SP_DEVICE_STRUCT_SIZE;
  out->ordinal = ordinal;
  out->device_handle = dev;
  out->hardware_name = dev->name;
  out->device_vendor = "NVIDIA";
  out->pci_bus_id = dev->pci_bus_id;
}

void destroy_device(const SP_Platform*, SP_Device* device) {
  if (device == nullptr) return;
  free_device(device_of(device));
  device->device_handle = nullptr;
}

int32_t get_numa_node(const SP_Device* device) {
  CudaDevice* dev = device_of(device);
  return dev == nullptr ? -1 : dev->numa_node;
}

int64_t get_memory_bandwidth(const SP_Device* device) {
  CudaDevice* dev = device_of(device);
  return dev == nullptr ? -1 : dev->bandwidth_bytes_per_s;
}

double get_gflops(const SP_Device* device) {
  CudaDevice* dev = device_of(device);
  return dev == nullptr ? -1.0 : dev->gflops;
}

void create_device_fns(const SP_Platform*, SE_CreateDeviceFnsParams* params,
                       TF_Status*) {
  SP_DeviceFns* fns = params->device_fns;
  fns->struct_size = SP_DEVICE_FNS_STRUCT_SIZE;
  fns->get_numa_node = get_numa_node;
  fns->get_memory_bandwidth = get_memory_bandwidth;
  fns->get_gflops = get_gflops;
}

void destroy_device_fns(const SP_Platform*, SP_DeviceFns*) {}

void create_stream_executor(const SP_Platform*,
                            SE_CreateStreamExecutorParams* params,
                            TF_Status*) {
  fill_stream_executor(params->stream_executor);
}

void destroy_stream_executor(const SP_Platform*, SP_StreamExecutor*) {}

void create_timer_fns(const SP_Platform*, SP_TimerFns* timer_fns, TF_Status*) {
  fill_timer_fns(timer_fns);
}

void destroy_timer_fns(const SP_Platform*, SP_TimerFns*) {}

void destroy_platform(SP_Platform*) {}
void destroy_platform_fns(SP_PlatformFns*) {}

}  // namespace
}  // namespace pgcuda

extern "C" void SE_InitPlugin(SE_PlatformRegistrationParams* params,
                              TF_Status* status) {
  using namespace pgcuda;
  if (params == nullptr || params->platform == nullptr ||
      params->platform_fns == nullptr) {
    TF_SetStatus(status, TF_INVALID_ARGUMENT,
                 "SE_InitPlugin: missing platform structs");
    return;
  }
  params->major_version = SE_MAJOR;
  params->minor_version = SE_MINOR;
  params->patch_version = SE_PATCH;
  params->destroy_platform = destroy_platform;
  params->destroy_platform_fns = destroy_platform_fns;

  SP_Platform* p = params->platform;
  p->struct_size = SP_PLATFORM_STRUCT_SIZE;
  p->name = "CUDA";
  p->type = "GPU";
  p->supports_unified_memory = 1;
  p->use_bfc_allocator = 1;
  p->force_memory_growth = 1;

  SP_PlatformFns* f = params->platform_fns;
  f->struct_size = SP_PLATFORM_FNS_STRUCT_SIZE;
  f->get_device_count = get_device_count;
  f->create_device = create_device;
  f->destroy_device = destroy_device;
  f->create_device_fns = create_device_fns;
  f->destroy_device_fns = destroy_device_fns;
  f->create_stream_executor = create_stream_executor;
  f->destroy_stream_executor = destroy_stream_executor;
  f->create_timer_fns = create_timer_fns;
  f->destroy_timer_fns = destroy_timer_fns;
}

// The native-stream extension (pluggable_native_stream.h): custom ops with
// CUDA code enqueue their kernels on the plugin's own cudaStream_t.
namespace pgcuda {
namespace {

void* native_stream(const SP_Device* device, SP_Stream stream, TF_Status* status) {
  CudaStream* s = stream_of(stream);
  if (device_of(device) == nullptr || s == nullptr) {
    TF_SetStatus(status, TF_INVALID_ARGUMENT, "native_stream: NULL device or stream");
    return nullptr;
  }
  flush_device(s->dev);  // the caller enqueues on the handle next
  TF_SetStatus(status, TF_OK, "");
  return static_cast<void*>(s->stream);
}

int compute_capability(const SP_Device* device, int* major, int* minor,
                       int* native_ordinal) {
  CudaDevice* d = device_of(device);
  if (d == nullptr) return 0;
  *major = d->cc_major;
  *minor = d->cc_minor;
  *native_ordinal = d->ordinal;
  return 1;
}

// Orders the plugin's `stream` and another library's CUDA stream `native`
// (or the legacy / per-thread default stream, 1 / 2) with one event: recorded
// on the side that goes first, waited for on the other. The event is the
// stream's own; `order_mu` keeps another thread from recording it again
// between this record and this wait.
void order_native(const SP_Device* device, SP_Stream stream, void* native,
                  PG_NativeOrder order, TF_Status* status) {
  CudaStream* s = stream_of(stream);
  if (device_of(device) == nullptr || s == nullptr) {
    TF_SetStatus(status, TF_INVALID_ARGUMENT, "order_native: NULL device or stream");
    return;
  }
  if (native == nullptr) {
    TF_SetStatus(status, TF_INVALID_ARGUMENT,
                 "order_native: stream 0 is ambiguous; pass 1 (legacy default stream), "
                 "2 (per-thread default stream) or a stream handle");
    return;
  }
  if (order != PG_ORDER_STREAM_AFTER_NATIVE && order != PG_ORDER_NATIVE_AFTER_STREAM) {
    TF_SetStatus(status, TF_INVALID_ARGUMENT, "order_native: unknown order");
    return;
  }
  flush_device(s->dev);
  cudaStream_t other = static_cast<cudaStream_t>(native);
  if (other == s->stream) {
    TF_SetStatus(status, TF_OK, "");
    return;
  }
  DeviceGuard guard(s->ordinal);  // the default streams are the current device's
  if (!guard.ok(status, s->ordinal)) return;
  std::lock_guard<std::mutex> lock(s->order_mu);
  cudaError_t e = cudaSuccess;
  if (s->order_event == nullptr) {
    e = cudaEventCreateWithFlags(&s->order_event, cudaEventDisableTiming);
    if (e != cudaSuccess) {
      s->order_event = nullptr;
      set_cuda_status(status, e, "cudaEventCreateWithFlags");
      return;
    }
  }
  const bool after_native = order == PG_ORDER_STREAM_AFTER_NATIVE;
  e = cudaEventRecord(s->order_event, after_native ? other : s->stream);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    set_cuda_status(status, e, "cudaEventRecord(%s stream)", after_native ? "native" : "device");
    return;
  }
  e = cudaStreamWaitEvent(after_native ? s->stream : other, s->order_event, 0);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    set_cuda_status(status, e, "cudaStreamWaitEvent(%s stream)",
                    after_native ? "device" : "native");
    return;
  }
  TF_SetStatus(status, TF_OK, "");
}

}  // namespace
}  // namespace pgcuda

extern "C" void PG_GetHostCopyFns(PG_HostCopyFns* fns) {
  if (fns == nullptr || fns->struct_size < sizeof(PG_HostCopyFns)) return;
  fns->version = PG_HOST_COPY_VERSION;
  fns->memcpy_htod_consumed = pgcuda::memcpy_htod_consumed;
}

extern "C" void PG_GetNativeStreamFns(PG_NativeStreamFns* fns) {
  if (fns == nullptr || fns->struct_size < PG_NATIVE_STREAM_FNS_STRUCT_SIZE_V1) return;
  fns->version = 1;
  fns->kind = PG_NATIVE_STREAM_CUDA;
  fns->native_stream = pgcuda::native_stream;
  fns->compute_capability = pgcuda::compute_capability;
  if (fns->struct_size < PG_NATIVE_STREAM_FNS_STRUCT_SIZE) return;  // a version-1 caller
  fns->version = 2;
  fns->order_native = pgcuda::order_native;
}
