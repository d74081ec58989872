// libnccl loaded at run time (dlopen), with the few entry points ccompress calls declared
// here, so no nccl.h is needed to build and a missing libnccl only disables NCCL. The
// declarations follow NCCL's stable C ABI (nccl.h of NCCL 2.x).
#pragma once

#include <memory>
#include <string>

#include "ccompress/error.h"  // SourceSite, CC_HERE

typedef struct CUstream_st* cudaStream_t;

namespace ccompress::cuda {

struct NcclCommOpaque;
using ncclComm_t = NcclCommOpaque*;
struct NcclUniqueId {
  char internal[128];
};
using ncclResult_t = int;  // ncclSuccess = 0, ncclInProgress = 7
constexpr ncclResult_t kNcclSuccess = 0;
constexpr ncclResult_t kNcclInProgress = 7;
constexpr int kNcclUint8 = 1;    // ncclUint8
constexpr int kNcclFloat32 = 7;  // ncclFloat32
constexpr int kNcclSum = 0;      // ncclSum

/// The loaded library's entry points.
struct NcclLibrary {
  ncclResult_t (*GetVersion)(int*) = nullptr;
  ncclResult_t (*GetUniqueId)(NcclUniqueId*) = nullptr;
  ncclResult_t (*CommInitRank)(ncclComm_t*, int, NcclUniqueId, int) = nullptr;
  ncclResult_t (*CommDestroy)(ncclComm_t) = nullptr;
  ncclResult_t (*CommAbort)(ncclComm_t) = nullptr;
  ncclResult_t (*CommGetAsyncError)(ncclComm_t, ncclResult_t*) = nullptr;
  const char* (*GetErrorString)(ncclResult_t) = nullptr;
  ncclResult_t (*GroupStart)() = nullptr;
  ncclResult_t (*GroupEnd)() = nullptr;
  ncclResult_t (*Send)(const void*, size_t, int, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*Recv)(void*, size_t, int, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*AllReduce)(const void*, void*, size_t, int, int, ncclComm_t,
                            cudaStream_t) = nullptr;
  std::string path;
  int version = 0;

  /// Throws NcclError naming @p what and NCCL's message when @p r is not ncclSuccess; the
  /// call site @p site is shown in debug mode, as CC_CHECK does. Use CC_NCCL_CHECK.
  void check(ncclResult_t r, const char* what, const SourceSite& site) const;
  /// "2.21.5" from the version code.
  std::string version_string() const;
};

/// Checks the result of an NCCL call: CC_NCCL_CHECK(lib, lib.Send(...), "ncclSend").
#define CC_NCCL_CHECK(lib, result, what) (lib).check((result), (what), CC_HERE(#result))

/// Loads libnccl from @p path (once per process; later calls must name the same library or
/// pass "" for the one loaded). Throws Unsupported with the loader's reason when it cannot.
/// Under the CPU emulator only its stand-in (cuda/emu/fake_nccl.cc, exported by the emulated
/// module itself) loads: a real libnccl would drive a GPU.
std::shared_ptr<const NcclLibrary> load_nccl(const std::string& path);

}  // namespace ccompress::cuda
