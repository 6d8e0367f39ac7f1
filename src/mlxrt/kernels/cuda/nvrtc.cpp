// NVRTC opened at run time. Why: nvrtc.h.
#include "mlxrt/kernels/cuda/nvrtc.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>
#include <mlx/version.h>

namespace mlxrt::kernels::cuda {

namespace fs = std::filesystem;

namespace {

// nvrtc.h's types, as the library's ABI has them: results are an enum (int), programs a pointer.
using Program = void*;
using Result = int;

template <typename F>
F symbol(void* handle, const char* name, const std::string& library) {
  void* p = dlsym(handle, name);
  if (!p) throw NvrtcError(fmt::format("NVRTC library {} has no {}", library, name));
  return reinterpret_cast<F>(p);
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// Where the object holding `address` was loaded from ("" if unknown).
std::string loaded_from(const void* address) {
  Dl_info info{};
  if (dladdr(address, &info) == 0 || !info.dli_fname) return "";
  return info.dli_fname;
}

bool has_bf16_header(const fs::path& dir) {
  std::error_code ec;
  return !dir.empty() && fs::exists(dir / "cuda_bf16.h", ec);
}

}  // namespace

struct Nvrtc::Api {
  Result (*version)(int*, int*);
  const char* (*error_string)(Result);
  Result (*create)(Program*, const char*, const char*, int, const char* const*, const char* const*);
  Result (*compile)(Program, int, const char* const*);
  Result (*log_size)(Program, size_t*);
  Result (*log)(Program, char*);
  Result (*cubin_size)(Program, size_t*);
  Result (*cubin)(Program, char*);
  Result (*ptx_size)(Program, size_t*);
  Result (*ptx)(Program, char*);
  Result (*destroy)(Program*);
};

Nvrtc::Nvrtc(const std::string& library) {
  std::vector<std::string> names;
  if (!library.empty())
    names.push_back(library);
  else if (auto v = env("MLXRT_NVRTC_LIBRARY"); !v.empty())
    names.push_back(v);
  else
    names = {"libnvrtc.so.13", "libnvrtc.so.12"};
  // The copy MLX's CUDA build has loaded first (its folder is on libmlx's run path, not ours).
  for (const auto& name : names) {
    handle_ = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (handle_) break;
  }
  std::string errors;
  for (size_t i = 0; !handle_ && i < names.size(); ++i) {
    handle_ = dlopen(names[i].c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle_) {
      const char* e = dlerror();
      errors += fmt::format("{}{}", errors.empty() ? "" : "; ", e ? e : names[i]);
    }
  }
  if (!handle_) throw NvrtcError("cannot open NVRTC: " + errors);
  const std::string label = names.size() == 1 ? names[0] : "libnvrtc";
  try {
    api_ = std::make_unique<Api>(Api{
        symbol<decltype(Api::version)>(handle_, "nvrtcVersion", label),
        symbol<decltype(Api::error_string)>(handle_, "nvrtcGetErrorString", label),
        symbol<decltype(Api::create)>(handle_, "nvrtcCreateProgram", label),
        symbol<decltype(Api::compile)>(handle_, "nvrtcCompileProgram", label),
        symbol<decltype(Api::log_size)>(handle_, "nvrtcGetProgramLogSize", label),
        symbol<decltype(Api::log)>(handle_, "nvrtcGetProgramLog", label),
        symbol<decltype(Api::cubin_size)>(handle_, "nvrtcGetCUBINSize", label),
        symbol<decltype(Api::cubin)>(handle_, "nvrtcGetCUBIN", label),
        symbol<decltype(Api::ptx_size)>(handle_, "nvrtcGetPTXSize", label),
        symbol<decltype(Api::ptx)>(handle_, "nvrtcGetPTX", label),
        symbol<decltype(Api::destroy)>(handle_, "nvrtcDestroyProgram", label),
    });
    if (api_->version(&major_, &minor_) != 0) throw NvrtcError("nvrtcVersion failed in " + label);
  } catch (...) {
    dlclose(handle_);
    throw;
  }
  path_ = loaded_from(reinterpret_cast<const void*>(api_->version));
  if (path_.empty()) path_ = label;
}

Nvrtc::~Nvrtc() {
  if (handle_) dlclose(handle_);
}

std::string Nvrtc::compile(const std::string& source, const std::string& program_name,
                           const std::vector<std::string>& options) const {
  Program prog = nullptr;
  if (Result r = api_->create(&prog, source.c_str(), program_name.c_str(), 0, nullptr, nullptr); r != 0)
    throw NvrtcError(fmt::format("nvrtcCreateProgram({}): {}", program_name, api_->error_string(r)));
  // The program is destroyed on every path out.
  struct Destroy {
    const Api* api;
    Program* p;
    ~Destroy() { api->destroy(p); }
  } destroy{api_.get(), &prog};
  std::vector<const char*> opts;
  opts.reserve(options.size());
  for (const auto& o : options) opts.push_back(o.c_str());
  const Result compiled = api_->compile(prog, static_cast<int>(opts.size()), opts.data());
  if (compiled != 0) {
    size_t size = 0;
    std::string log;
    if (api_->log_size(prog, &size) == 0 && size > 1) {
      log.resize(size);
      api_->log(prog, log.data());
      log.resize(size - 1);
    }
    throw NvrtcError(
        fmt::format("NVRTC could not compile {} ({}): {}", program_name, api_->error_string(compiled), log));
  }
  bool machine_code = false;
  for (const auto& o : options) machine_code = machine_code || o.rfind("--gpu-architecture=sm_", 0) == 0;
  size_t size = 0;
  std::string image;
  if (machine_code) {
    if (api_->cubin_size(prog, &size) != 0) throw NvrtcError("nvrtcGetCUBINSize failed for " + program_name);
    image.resize(size);
    if (api_->cubin(prog, image.data()) != 0) throw NvrtcError("nvrtcGetCUBIN failed for " + program_name);
  } else {
    if (api_->ptx_size(prog, &size) != 0) throw NvrtcError("nvrtcGetPTXSize failed for " + program_name);
    image.resize(size);
    if (api_->ptx(prog, image.data()) != 0) throw NvrtcError("nvrtcGetPTX failed for " + program_name);
  }
  return image;
}

std::vector<std::string> device_options(int cc_major, int cc_minor, const std::string& cuda_include_dir) {
  std::vector<std::string> options{
      fmt::format("--gpu-architecture=sm_{}{}{}", cc_major, cc_minor, cc_major >= 9 ? "a" : "")};
  if (!cuda_include_dir.empty()) options.push_back("--include-path=" + cuda_include_dir);
  return options;
}

std::string find_cuda_include_dir(const Nvrtc& nvrtc) {
  if (auto v = env("MLXRT_CUDA_INCLUDE_DIR"); !v.empty()) return has_bf16_header(v) ? v : "";
  const std::string cu = fmt::format("cu{}", nvrtc.major());
  std::vector<fs::path> candidates;
  // MLX's CUDA wheel: <site-packages>/mlx/lib/libmlx.so beside <site-packages>/nvidia/cuN/include.
  if (auto lib = loaded_from(reinterpret_cast<const void*>(&mlx::core::version)); !lib.empty())
    candidates.push_back(fs::path(lib).parent_path().parent_path().parent_path() / "nvidia" / cu / "include");
  // NVIDIA's wheel of NVRTC: <site-packages>/nvidia/cuN/lib/libnvrtc.so.N.
  candidates.push_back(fs::path(nvrtc.path()).parent_path().parent_path() / "include");
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
    if (auto v = env(var); !v.empty()) candidates.push_back(fs::path(v) / "include");
  candidates.push_back("/usr/local/cuda/include");
  for (const auto& dir : candidates)
    if (has_bf16_header(dir)) return dir.string();
  return "";
}

}  // namespace mlxrt::kernels::cuda
