// Checks of the CUDA backend's host side that need the emulator's internals and reach no
// Python API: run one by name with ccompress_emu_check (extern "C", through ctypes, in a
// child process: they load the emulated NCCL and may use CCOMPRESS_EMU_DEVICES=2). Each
// returns "ok" or what went wrong (tests/cuda/test_nccl_emulated.py).
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ccompress/error.h"
#include "kernels/device_util.h"
#include "transport/nccl_transport.h"

extern "C" __attribute__((visibility("default"))) const char* ccompress_emu_check(const char* name);

namespace {

using namespace ccompress;
using namespace ccompress::cuda;

std::string own_path() {
  Dl_info info{};
  dladdr(reinterpret_cast<void*>(&ccompress_emu_check), &info);
  return info.dli_fname != nullptr ? info.dli_fname : "";
}

// NcclTransport::cancel on a started host group: NCCL cannot withdraw it, so its messages
// would match a later call's. The communicator must refuse further use, saying why, and the
// caller's buffers must not be written later.
std::string cancel_abandons_a_started_host_group() {
  auto lib = load_nccl(own_path());
  const NcclUniqueId id = nccl_unique_id(*lib);
  std::unique_ptr<NcclTransport> t[2];
  std::thread joiner([&] { t[1] = std::make_unique<NcclTransport>(lib, id, 2, 1, std::make_shared<RankStreams>(0)); });
  t[0] = std::make_unique<NcclTransport>(lib, id, 2, 0, std::make_shared<RankStreams>(0));
  joiner.join();
  uint64_t out = 7, in = 0xAAAA;
  std::vector<Request> reqs{t[0]->irecv(1, &in, 8, 0), t[0]->isend(1, &out, 8, 0)};
  if (!t[0]->test_some(reqs).empty()) return "the exchange completed before its peer posted";
  t[0]->cancel(reqs);
  // The peer posts its side late; rank 1 gives up on rank 0 (which has abandoned it).
  uint64_t peer_out = 9, peer_in = 0;
  std::vector<Request> theirs{t[1]->isend(0, &peer_out, 8, 0), t[1]->irecv(0, &peer_in, 8, 0)};
  try {
    t[1]->wait_some(theirs, 0.3);
  } catch (const Error&) {
  }
  std::string verdict = "ok";
  try {
    uint64_t x = 1;
    std::vector<Request> next{t[0]->isend(1, &x, 8, 0)};
    t[0]->wait_some(next, 0.3);
    verdict = "a later exchange ran on a communicator with an abandoned group";
  } catch (const NcclError& e) {
    if (std::strstr(e.what(), "abandoned") == nullptr) verdict = std::string("NcclError without the reason: ") + e.what();
  } catch (const std::exception& e) {
    verdict = std::string("a misleading error: ") + e.what();
  }
  if (in != 0xAAAA) verdict = "the abandoned receive wrote the caller's buffer";
  return verdict;
}

// copy_sync(.., stream 0) with device memory of device 1 from a thread whose current device
// is 0: the copy must run on device 1's legacy stream, after the work enqueued there.
std::string copy_sync_runs_on_the_device_of_its_memory() {
  int count = 0;
  cudaGetDeviceCount(&count);
  if (count < 2) return "needs two devices (CCOMPRESS_EMU_DEVICES=2)";
  void* p = device_alloc(64, 1);
  {
    DeviceGuard g(1);
    CC_CUDA_CHECK(cudaMemsetAsync(p, 0x11, 64, nullptr), "cudaMemsetAsync");  // device 1, stream 0
  }
  unsigned char host[64];
  std::memset(host, 0, sizeof host);
  copy_sync(host, p, 64, nullptr);
  device_free(p, 1);
  for (unsigned char b : host)
    if (b != 0x11) return "the copy read the memory before device 1's stream 0 wrote it";
  return "ok";
}

}  // namespace

const char* ccompress_emu_check(const char* name) {
  static thread_local std::string result;
  try {
    const std::string n = name;
    if (n == "cancel_abandons_a_started_host_group") {
      result = cancel_abandons_a_started_host_group();
    } else if (n == "copy_sync_runs_on_the_device_of_its_memory") {
      result = copy_sync_runs_on_the_device_of_its_memory();
    } else {
      result = "no check named " + n;
    }
  } catch (const std::exception& e) {
    result = std::string("raised: ") + e.what();
  }
  return result.c_str();
}
