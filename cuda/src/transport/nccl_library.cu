#include "transport/nccl_library.h"

#include <dlfcn.h>

#include <mutex>
#include <sstream>

#include "ccompress/error.h"

namespace ccompress::cuda {

namespace {

template <class F>
void bind(void* handle, const char* name, F& fn, const std::string& path) {
  fn = reinterpret_cast<F>(dlsym(handle, name));
  CC_CHECK_AS(Unsupported, fn != nullptr,
              path << " has no " << name << "; ccompress needs NCCL 2.x (2.7 or newer)");
}

}  // namespace

void NcclLibrary::check(ncclResult_t r, const char* what, const SourceSite& site) const {
  if (r == kNcclSuccess) return;
  std::ostringstream os;
  os << what << " failed: " << GetErrorString(r) << " (NCCL " << r << ")";
  detail::throw_at<NcclError>(site, os.str());
}

std::string NcclLibrary::version_string() const {
  int v = version, major, minor, patch;
  if (v >= 10000) {
    major = v / 10000, minor = (v % 10000) / 100, patch = v % 100;
  } else {
    major = v / 1000, minor = (v % 1000) / 100, patch = v % 100;
  }
  std::ostringstream os;
  os << major << "." << minor << "." << patch;
  return os.str();
}

std::shared_ptr<const NcclLibrary> load_nccl(const std::string& path) {
  static std::mutex mu;
  static std::shared_ptr<const NcclLibrary> loaded;
  std::lock_guard<std::mutex> lock(mu);
  if (loaded) {
    CC_CHECK(path.empty() || path == loaded->path,
             "libnccl is already loaded from " << loaded->path << "; cannot also load " << path);
    return loaded;
  }
  CC_CHECK_AS(Unsupported, !path.empty(),
              "no libnccl to load (pip install nvidia-nccl-cu13, or set NCCL_ROOT)");
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  CC_CHECK_AS(Unsupported, handle != nullptr, "cannot load " << path << ": " << dlerror());
#if defined(CCOMPRESS_CUDA_EMULATOR)
  if (dlsym(handle, "ccompress_emulated_nccl") == nullptr) {
    dlclose(handle);  // a real libnccl would drive a GPU
    CC_CHECK_AS(Unsupported, false,
                "NCCL does not run under the CPU emulation of the CUDA runtime; only its "
                "in-process stand-in does (tests: NCCL_ROOT naming the emulated module)");
  }
#endif
  auto lib = std::make_shared<NcclLibrary>();
  lib->path = path;
  bind(handle, "ncclGetVersion", lib->GetVersion, path);
  bind(handle, "ncclGetUniqueId", lib->GetUniqueId, path);
  bind(handle, "ncclCommInitRank", lib->CommInitRank, path);
  bind(handle, "ncclCommDestroy", lib->CommDestroy, path);
  bind(handle, "ncclCommAbort", lib->CommAbort, path);
  bind(handle, "ncclCommGetAsyncError", lib->CommGetAsyncError, path);
  bind(handle, "ncclGetErrorString", lib->GetErrorString, path);
  bind(handle, "ncclGroupStart", lib->GroupStart, path);
  bind(handle, "ncclGroupEnd", lib->GroupEnd, path);
  bind(handle, "ncclSend", lib->Send, path);
  bind(handle, "ncclRecv", lib->Recv, path);
  bind(handle, "ncclAllReduce", lib->AllReduce, path);
  CC_NCCL_CHECK(*lib, lib->GetVersion(&lib->version), "ncclGetVersion");
  // The library stays loaded for the life of the process (communicators may outlive us).
  loaded = lib;
  return loaded;
}

}  // namespace ccompress::cuda
