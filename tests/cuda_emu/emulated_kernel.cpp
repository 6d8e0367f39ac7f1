// mlxrt's CUDA kernels compiled for the CPU and run there. Why and how: emulated_kernel.h.
#include "emulated_kernel.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <mlx/allocator.h>
#include <mlx/ops.h>
#include <mlx/transforms.h>

#include "simt.h"

namespace mlxrt::cuda_emu {

namespace fs = std::filesystem;
using kernels::cuda::KernelParameter;
using kernels::cuda::KernelSpec;

namespace {

constexpr const char* kEntry = "mlxrt_emu_entry";
// No contraction of a * b + c (device_shim.h says why); -O1: a fraction of a second a program.
constexpr const char* kFlags = "-x c++ -std=c++20 -O1 -fPIC -shared -ffp-contract=off";

// A loaded program: its library, its table and its entry.
class Program {
 public:
  explicit Program(const fs::path& library) {
    handle_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle_) throw std::runtime_error(fmt::format("[cuda_emu] cannot load {}: {}", library.string(), dlerror()));
    slot_ = reinterpret_cast<mlxrt_emu_slot_fn>(dlsym(handle_, "mlxrt_emu_slot"));
    entry_ = reinterpret_cast<KernelEntry>(dlsym(handle_, kEntry));
    if (!slot_ || !entry_) {
      dlclose(handle_);
      throw std::runtime_error(fmt::format("[cuda_emu] {} lacks mlxrt_emu_slot or its entry", library.string()));
    }
  }
  ~Program() { dlclose(handle_); }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  void run(Dim3 grid, Dim3 block, void** params, bool resident) { launch(entry_, slot_, grid, block, params, resident); }

 private:
  void* handle_ = nullptr;
  KernelEntry entry_ = nullptr;
  mlxrt_emu_slot_fn slot_ = nullptr;
};

fs::path cache_dir() {
  if (const char* d = std::getenv("MLXRT_EMU_CACHE_DIR"); d && *d) return d;
  return MLXRT_EMU_CACHE_DIR;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The library for `text`: from the cache folder, else compiled into it (written under a name of
// this process's, then renamed: tests in other processes may compile the same program at once).
fs::path library_for(const std::string& text) {
  const auto dir = cache_dir();
  fs::create_directories(dir);
  // Keyed by everything the library is made from: the text, the shim's headers, the command.
  static const std::string made_with = read_file(fs::path(MLXRT_EMU_SHIM_DIR) / "device_shim.h") +
                                       read_file(fs::path(MLXRT_EMU_SHIM_DIR) / "emu_abi.h") + kFlags + MLXRT_EMU_CXX;
  const auto stem = fmt::format("{:016x}", std::hash<std::string>{}(text + made_with));
  const auto library = dir / (stem + ".so");
  if (fs::exists(library)) return library;
  const auto tag = fmt::format("{}.{}", stem, getpid());
  const auto source = dir / (tag + ".cpp"), partial = dir / (tag + ".so"), log = dir / (tag + ".log");
  {
    std::ofstream out(source);
    out << text;
    if (!out) throw std::runtime_error("[cuda_emu] cannot write " + source.string());
  }
  const auto command = fmt::format(
      "'{}' {} -I'{}' -include device_shim.h '{}' -o '{}' 2> '{}'", MLXRT_EMU_CXX, kFlags, MLXRT_EMU_SHIM_DIR,
      source.string(), partial.string(), log.string());
  const int rc = std::system(command.c_str());
  if (rc != 0) {
    const auto messages = read_file(log);
    throw std::runtime_error(fmt::format("[cuda_emu] the compiler rejected {} (exit {}):\n{}", source.string(), rc,
                                         messages.substr(0, 4000)));
  }
  fs::rename(partial, library);
  fs::remove(source);
  fs::remove(log);
  return library;
}

// The copies of a launch's buffers at a GPU's alignment (emulated_launch), by the MLX data they
// stand for.
class Staging {
 public:
  // Copies of the buffers of `arrays` (inputs, then outputs); pointer(i) is array i's.
  explicit Staging(const std::vector<mx::array>& arrays) {
    for (const auto& a : arrays) {
      auto* data = static_cast<char*>(const_cast<void*>(a.data<void>()));
      const size_t bytes = std::max<size_t>(a.data_size() * a.itemsize(), 1);
      auto it = std::find_if(copies_.begin(), copies_.end(), [&](const Copy& c) { return c.data == data; });
      if (it == copies_.end()) {
        auto& c = copies_.emplace_back();
        c.data = data;
        c.lead = static_cast<size_t>(a.offset()) % kAlign;
        it = copies_.end() - 1;
      }
      it->bytes = std::max(it->bytes, bytes);
      index_.push_back(static_cast<size_t>(it - copies_.begin()));
    }
    for (auto& c : copies_) {
      c.memory.reset(static_cast<char*>(std::aligned_alloc(kAlign, (c.lead + c.bytes + kAlign - 1) / kAlign * kAlign)));
      if (!c.memory) throw std::bad_alloc();
      std::memcpy(c.memory.get() + c.lead, c.data, c.bytes);
    }
  }
  void* pointer(size_t i) const {
    const auto& c = copies_[index_[i]];
    return c.memory.get() + c.lead;
  }
  void write_back() const {
    for (const auto& c : copies_) std::memcpy(c.data, c.memory.get() + c.lead, c.bytes);
  }

 private:
  static constexpr size_t kAlign = 256;
  struct Copy {
    std::unique_ptr<char, decltype(&std::free)> memory{nullptr, &std::free};
    char* data = nullptr;
    size_t lead = 0, bytes = 0;
  };
  std::vector<Copy> copies_;
  std::vector<size_t> index_;
};

// Loaded programs by text, for this process.
Program& program_for(const std::string& text) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<Program>> loaded;
  std::lock_guard lock(mutex);
  auto& slot = loaded[text];
  if (!slot) slot = std::make_unique<Program>(library_for(text));
  return *slot;
}

}  // namespace

std::string emulated_program_text(const KernelSpec& spec, const std::vector<mx::Dtype>& input_types,
                                  const std::vector<mx::Shape>& input_shapes,
                                  const std::vector<mx::Dtype>& output_types,
                                  const std::vector<std::pair<std::string, mx::fast::TemplateArg>>& template_args) {
  auto text = kernels::cuda::kernel_function_source(spec, input_types, input_shapes, output_types, template_args);
  // The entry: each parameter read from where params[i] points (cuLaunchKernel's convention).
  std::vector<std::string> args;
  const auto params = kernels::cuda::kernel_parameters(spec, input_types, input_shapes, output_types);
  for (size_t i = 0; i < params.size(); ++i)
    args.push_back(params[i].shape ? fmt::format("*static_cast<const {}*>(p[{}])", params[i].type, i)
                                   : fmt::format("*static_cast<{} const*>(p[{}])", params[i].type, i));
  text += fmt::format("\nextern \"C\" __attribute__((visibility(\"default\"))) void {}(void** p) {{\n  {}(\n    {});\n}}\n",
                      kEntry, spec.name, fmt::join(args, ",\n    "));
  return text;
}

std::vector<mx::array> emulated_launch(const KernelSpec& spec, const std::vector<mx::array>& inputs,
                                       const std::vector<mx::Shape>& output_shapes,
                                       const std::vector<mx::Dtype>& output_dtypes, std::tuple<int, int, int> grid,
                                       std::tuple<int, int, int> threadgroup,
                                       const std::vector<std::pair<std::string, mx::fast::TemplateArg>>& template_args,
                                       bool resident) {
  if (output_shapes.size() != output_dtypes.size())
    throw std::invalid_argument("[cuda_emu] output shapes and types differ in number");
  const auto [gx, gy, gz] = grid;
  const auto [tx, ty, tz] = threadgroup;
  if (tx < 1 || ty < 1 || tz < 1 || gx < 1 || gy < 1 || gz < 1)
    throw std::invalid_argument("[cuda_emu] grid and threadgroup sizes must be positive");
  // MLX's grid counts threads; a partial block at the end is launched whole (as MLX rounds up).
  const Dim3 blocks{static_cast<unsigned>((gx + tx - 1) / tx), static_cast<unsigned>((gy + ty - 1) / ty),
                    static_cast<unsigned>((gz + tz - 1) / tz)};
  const Dim3 block{static_cast<unsigned>(tx), static_cast<unsigned>(ty), static_cast<unsigned>(tz)};

  std::vector<mx::array> ins;
  std::vector<mx::Dtype> types;
  std::vector<mx::Shape> shapes;
  for (const auto& in : inputs) {
    ins.push_back(spec.ensure_row_contiguous ? mx::contiguous(in) : in);
    types.push_back(in.dtype());
    shapes.push_back(in.shape());
  }
  mx::eval(ins);
  for (const auto& in : ins)
    if (spec.ensure_row_contiguous && !in.flags().row_contiguous)
      throw std::logic_error("[cuda_emu] mx::contiguous left an input that is not row-contiguous");
  std::vector<mx::array> outs;
  // Buffers of their own (MLX's zeros are a Full node's output; mx::copy would only share a buffer).
  for (size_t i = 0; i < output_shapes.size(); ++i) outs.emplace_back(mx::zeros(output_shapes[i], output_dtypes[i]));
  mx::eval(outs);
  // Every byte 0xFF (NaN in the floating types, -1 in the integers): what the kernel leaves unwritten shows.
  for (auto& o : outs) std::memset(o.data<void>(), 0xFF, o.nbytes());

  // The kernel sees each buffer where a GPU would put it: cudaMalloc's bases are 256-byte aligned,
  // MLX's CPU buffers only 8-byte, and the kernels take their 16-byte loads only where a pointer is
  // aligned, so without this the emulator would test only their element-wise fallbacks. A view
  // keeps its offset's alignment; inputs sharing a buffer share its copy (a kernel that writes an
  // input in place, as the decoder layer writes its cache, writes what the others read), and every
  // copy is written back after the run.
  std::vector<mx::array> buffers = ins;
  buffers.insert(buffers.end(), outs.begin(), outs.end());
  const Staging staging(buffers);

  const auto text = emulated_program_text(spec, types, shapes, output_dtypes, template_args);
  const auto params = kernels::cuda::kernel_parameters(spec, types, shapes, output_dtypes);
  // Storage for each parameter's value; params[i] points at slot i.
  std::vector<const void*> pointers(params.size());
  std::vector<std::array<int32_t, 10>> shape_values(params.size());
  std::vector<void*> args(params.size());
  size_t in = 0, out = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].shape) {
      const auto& s = ins[in - 1].shape();  // the shape follows its input
      if (s.size() > 10) throw std::invalid_argument("[cuda_emu] an input of more than 10 dimensions");
      shape_values[i].fill(0);
      for (size_t d = 0; d < s.size(); ++d) shape_values[i][d] = s[d];
      args[i] = shape_values[i].data();
    } else {
      pointers[i] = in < ins.size() ? staging.pointer(in++) : staging.pointer(ins.size() + out++);
      args[i] = &pointers[i];
    }
  }
  program_for(text).run(blocks, block, args.data(), resident);
  staging.write_back();
  return outs;
}

}  // namespace mlxrt::cuda_emu
