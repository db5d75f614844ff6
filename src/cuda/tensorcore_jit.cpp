#include "cuda/tensorcore_jit.hpp"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <string>
#include <utility>

#include "cuda/cuda_check.hpp"
#include "cuda/once_per_key.hpp"
#include "cuda/tensorcore_kernel.cuh"
#include "cuda/tensorcore_kernel_source.hpp"  // generated: kTensorcoreKernelSource
#include "helixmla/error.hpp"

namespace helixmla::cuda {

namespace {

// The few driver functions the just-in-time path uses, resolved at first use.
struct DriverApi {
  decltype(&cuGetErrorString) get_error_string = nullptr;
  decltype(&cuModuleLoadData) module_load_data = nullptr;
  decltype(&cuModuleUnload) module_unload = nullptr;
  decltype(&cuModuleGetFunction) module_get_function = nullptr;
  decltype(&cuFuncSetAttribute) func_set_attribute = nullptr;
  decltype(&cuFuncGetAttribute) func_get_attribute = nullptr;
  decltype(&cuLaunchKernel) launch_kernel = nullptr;
  decltype(&cuTensorMapEncodeTiled) tensor_map_encode_tiled = nullptr;
};

template <typename Fn>
void resolve(const char* symbol, Fn& fn) {
  void* address = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  HELIXMLA_CUDA_CHECK(
      cudaGetDriverEntryPointByVersion(symbol, &address, 12000, cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess || !address) {
    throw RuntimeFailure(std::string("the CUDA driver has no ") + symbol);
  }
  fn = reinterpret_cast<Fn>(address);
}

const DriverApi& driver() {
  static const DriverApi api = [] {
    DriverApi a;
    resolve("cuGetErrorString", a.get_error_string);
    resolve("cuModuleLoadData", a.module_load_data);
    resolve("cuModuleUnload", a.module_unload);
    resolve("cuModuleGetFunction", a.module_get_function);
    resolve("cuFuncSetAttribute", a.func_set_attribute);
    resolve("cuFuncGetAttribute", a.func_get_attribute);
    resolve("cuLaunchKernel", a.launch_kernel);
    resolve("cuTensorMapEncodeTiled", a.tensor_map_encode_tiled);
    return a;
  }();
  return api;
}

void check_driver(CUresult status, const char* what) {
  if (status != CUDA_SUCCESS) {
    const char* text = nullptr;
    driver().get_error_string(status, &text);
    throw RuntimeFailure(std::string(what) + " failed: " + (text ? text : "unknown driver error"));
  }
}

std::string device_arch(int device) {
  int major = 0, minor = 0;
  HELIXMLA_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  HELIXMLA_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  // sm_90a: the architecture-specific target the precompiled kernels use too.
  return "sm_" + std::to_string(major) + std::to_string(minor) + (major == 9 ? "a" : "");
}

}  // namespace

NvrtcProgram tensorcore_jit_program(const TensorcoreVariant& variant, const std::string& arch) {
  NvrtcProgram program;
  program.name = variant.name() + ".cu";
  program.arch = arch;
  // Line information costs no machine code and lets compute-sanitizer name
  // a JIT kernel's source lines, as it does for the precompiled ones (the
  // embedded text's #line directives name the kernel's files).
  program.options = {"-std=c++17", "-lineinfo"};
  // The variant's Config and decode_item arguments, in their template order.
  const std::string config = fmt::format("{}, {}, {}, {}", variant.rows, variant.kv_kind(), variant.engine_kind(),
                                         variant.build_blocks());
  const std::string args = fmt::format("{}, {}, {}, {}, {}, {}", variant.rows, variant.page_size, variant.elem_kind(),
                                       variant.kv_kind(), variant.engine_kind(), variant.build_blocks());
  // The entry's own lines, after the kernel text's #line directives.
  program.source = fmt::format(
      "{}\n#line 1 \"{}\"\nextern \"C\" __global__ void __launch_bounds__(helixmla_tc::Config<{}>::kBlockThreads, "
      "helixmla_tc::Config<{}>::kBlocksPerSm)\n{}(helixmla_tc::Params p, const __grid_constant__ "
      "helixmla_tc::KvTensorMap kv_map) {{\n  helixmla_tc::decode_item<{}>(p, &kv_map);\n}}\n",
      kTensorcoreKernelSource, program.name, config, config, kTensorcoreJitEntry, args);
  return program;
}

CUfunction tensorcore_jit_function(const TensorcoreVariant& variant, int smem_bytes) {
  static OncePerKey<std::pair<int, std::string>, CUfunction> loaded;  // modules stay loaded

  int device = 0;
  HELIXMLA_CUDA_CHECK(cudaGetDevice(&device));
  HELIXMLA_CUDA_CHECK(cudaFree(nullptr));  // makes the runtime's primary context current
  return loaded.get({device, variant.name()}, [&] {
    const NvrtcProgram program = tensorcore_jit_program(variant, device_arch(device));
    const std::vector<char> cubin =
        cached_cubin(program, variant.name() + "-" + program.arch, JitCache(JitCache::default_directory()));
    CUmodule module = nullptr;
    check_driver(driver().module_load_data(&module, cubin.data()), "cuModuleLoadData");
    // A failed make is retried by the next caller, so a module whose kernel
    // cannot be set up is unloaded rather than left loaded once per retry.
    try {
      CUfunction function = nullptr;
      check_driver(driver().module_get_function(&function, module, kTensorcoreJitEntry), "cuModuleGetFunction");
      check_driver(
          driver().func_set_attribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem_bytes),
          "cuFuncSetAttribute");
      return function;
    } catch (...) {
      driver().module_unload(module);
      throw;
    }
  });
}

int jit_kernel_registers(CUfunction function) {
  int registers = 0;
  check_driver(driver().func_get_attribute(&registers, CU_FUNC_ATTRIBUTE_NUM_REGS, function), "cuFuncGetAttribute");
  return registers;
}

void launch_jit_kernel(CUfunction function, unsigned blocks, int threads, int smem_bytes, cudaStream_t stream,
                       void** args) {
  check_driver(driver().launch_kernel(function, blocks, 1, 1, static_cast<unsigned>(threads), 1, 1,
                                      static_cast<unsigned>(smem_bytes), stream, args, nullptr),
               "cuLaunchKernel");
}

void encode_kv_tensor_map(void* map, const void* pool, std::int64_t rows) {
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(helixmla_tc::kHeadDim), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(helixmla_tc::kHeadDim) * 2};  // bytes between rows
  const cuuint32_t box[2] = {64, 64};
  const cuuint32_t element_strides[2] = {1, 1};
  // 16-bit elements moved as they are: bf16 and fp16 alike.
  check_driver(driver().tensor_map_encode_tiled(static_cast<CUtensorMap*>(map), CU_TENSOR_MAP_DATA_TYPE_UINT16, 2,
                                                const_cast<void*>(pool), dims, strides, box, element_strides,
                                                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                                CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
               "cuTensorMapEncodeTiled");
}

}  // namespace helixmla::cuda
