// CUDA KernelBackend: dispatch to the codec families' launchers (codecs/registry.h). The ring
// hop (decode_reduce_encode) and decode to a dtype are fused for every codec family, with no fp32 scratch: the hop is the
// family's encode kernel loading decode(wire) + x (the decode kernel's own code) instead of
// its input, decode to a dtype the decode kernel storing a cast. Every hop is one launch; a
// 4-bit hop (nvfp4 / hnvfp4, hint4) needs a piece's run amax before quantizing, so its
// encode kernel reads each piece twice (the amax, then the codes), decoding the incoming
// piece both times. The fp32 operations per element are the CPU backend's, in its order, so the bytes
// are the same; src and dst of a hop may be the same buffer (each family's kernels say why).
#include "kernels/cuda_backend.h"

#include <cuda_runtime.h>

#include <cstring>

#include "ccompress/error.h"
#include "codecs/registry.h"
#include "kernels/elementwise_kernels.h"

namespace ccompress::cuda {

void check_cuda_status(int err, const char* what, const SourceSite& site) {
  auto e = static_cast<cudaError_t>(err);
  if (e == cudaSuccess) return;
  cudaGetLastError();  // clear a sticky launch error for later checks
  detail::throw_at<CudaError>(site, std::string(what) + " failed: " + cudaGetErrorString(e));
}

int device_count() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // reset the error state so a later launch check does not see it
    return 0;
  }
  return count;
}

DeviceGuard::DeviceGuard(int device, bool quiet) {
  if (quiet) {
    if (cudaGetDevice(&previous_) != cudaSuccess || cudaSetDevice(device) != cudaSuccess) {
      cudaGetLastError();
      previous_ = -1;
    }
    return;
  }
  CC_CUDA_CHECK(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != device) CC_CUDA_CHECK(cudaSetDevice(device), "cudaSetDevice");
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

RankStreams::RankStreams(int device) : device_(device) {
  int count = device_count();
  CC_CHECK_AS(Unsupported, count > 0, "no CUDA device is visible (no GPU, no driver, or "
                                      "CUDA_VISIBLE_DEVICES hides them)");
  CC_CHECK(device >= 0 && device < count,
           "CUDA device " << device << " does not exist; " << count << " visible");
  DeviceGuard g(device);
  CC_CUDA_CHECK(cudaStreamCreateWithFlags(&codec_, cudaStreamNonBlocking), "creating the codec stream");
  CC_CUDA_CHECK(cudaStreamCreateWithFlags(&comm_, cudaStreamNonBlocking), "creating the comm stream");
  CC_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "creating the ordering event");
}

RankStreams::~RankStreams() {
  // Destroying a stream with work pending is allowed: the work still completes.
  DeviceGuard g(device_, true);
  cudaEventDestroy(event_);
  cudaStreamDestroy(comm_);
  cudaStreamDestroy(codec_);
}

void RankStreams::order(cudaStream_t first, cudaStream_t waiter) {
  if (first == waiter) return;
  CC_CUDA_CHECK(cudaEventRecord(event_, first), "cudaEventRecord");
  CC_CUDA_CHECK(cudaStreamWaitEvent(waiter, event_, 0), "cudaStreamWaitEvent");
}

DeviceScratch::~DeviceScratch() {
  if (ptr_ != nullptr) cudaFree(ptr_);  // cudaFree waits for the device to stop using it
}

void* DeviceScratch::get(int64_t bytes, cudaStream_t user_a, cudaStream_t user_b) {
  if (bytes <= bytes_ && ptr_ != nullptr) return ptr_;
  if (ptr_ != nullptr) {
    CC_CUDA_CHECK(cudaStreamSynchronize(user_a), "scratch growth: waiting for the codec stream");
    CC_CUDA_CHECK(cudaStreamSynchronize(user_b), "scratch growth: waiting for the comm stream");
    CC_CUDA_CHECK(cudaFree(ptr_), "cudaFree");
    ptr_ = nullptr;
    bytes_ = 0;
  }
  // Grow by half again so that a slowly growing sequence of calls reallocates rarely.
  int64_t want = align_up(std::max<int64_t>(bytes + bytes / 2, 1 << 20), 256);
  cudaError_t err = cudaMalloc(&ptr_, size_t(want));
  if (err != cudaSuccess) {
    cudaGetLastError();
    ptr_ = nullptr;
    want = align_up(std::max<int64_t>(bytes, 1), 256);
    err = cudaMalloc(&ptr_, size_t(want));
  }
  CC_CUDA_CHECK(err, "cudaMalloc of collective scratch");
  bytes_ = want;
  return ptr_;
}

CudaBackend::CudaBackend(std::shared_ptr<RankStreams> streams) : streams_(std::move(streams)) {
  CC_CHECK(streams_ != nullptr, "CudaBackend needs the rank's streams");
}

void* CudaBackend::workspace(int64_t bytes) {
  // A new collective. The previous one waited for its copies through the slots
  // (finish_reads), or it failed: then a copy of it may still be queued (a header read on
  // the comm stream could land in a slot after this call's host memcpy into it), so wait
  // for both streams before handing the slots out again.
  if (!reads_finished_) {
    CC_CUDA_CHECK(cudaStreamSynchronize(streams_->codec()), "after a failed collective, waiting for the codec stream");
    CC_CUDA_CHECK(cudaStreamSynchronize(streams_->comm()), "after a failed collective, waiting for the comm stream");
  }
  reads_finished_ = false;
  slots_.reset();
  return workspace_.get(bytes, streams_->codec(), streams_->comm());
}

void CudaBackend::write_bytes(void* dst, const void* src, int64_t bytes) {
  // From pinned memory, so the copy never waits for the stream: a pageable source may make
  // the driver synchronise. The slot outlives the copy: every header write precedes a send
  // that completes before the collective returns.
  void* slot = slots_.take(bytes);
  std::memcpy(slot, src, size_t(bytes));
  CC_CUDA_CHECK(cudaMemcpyAsync(dst, slot, size_t(bytes), cudaMemcpyHostToDevice, streams_->codec()),
             "writing a message header");
}

const void* CudaBackend::read_bytes(const void* src, int64_t bytes) {
  void* slot = slots_.take(bytes);
  CC_CUDA_CHECK(cudaMemcpyAsync(slot, src, size_t(bytes), cudaMemcpyDeviceToHost, streams_->comm()),
             "reading a message header");
  return slot;
}

void CudaBackend::finish_reads() {
  CC_CUDA_CHECK(cudaStreamSynchronize(streams_->comm()), "waiting for the message headers");
  reads_finished_ = true;
}

const void* CudaBackend::read_results(const void* src, int64_t bytes) {
  streams_->order(streams_->codec(), streams_->comm());
  return read_bytes(src, bytes);
}

bool CudaBackend::count_nonfinite(const void* src, DType t, int64_t n, int64_t* count) {
  launch_count_nonfinite(src, t, n, count, streams_->codec());
  return true;
}

void CudaBackend::feedback_residual(const float* v, const float* decoded, int64_t n,
                                    float* residual, int64_t* count) {
  launch_feedback_residual(v, decoded, n, residual, count, streams_->codec());
}

PinnedSlots::~PinnedSlots() {
  for (void* b : blocks_) cudaFreeHost(b);
}

void* PinnedSlots::take(int64_t bytes) {
  CC_CHECK(bytes <= kSlotBytes, "a pinned read slot holds " << kSlotBytes << " bytes, not " << bytes);
  const size_t block = size_t(next_ / kSlotsPerBlock);
  if (block == blocks_.size()) {
    void* p = nullptr;
    CC_CUDA_CHECK(cudaMallocHost(&p, size_t(kSlotsPerBlock * kSlotBytes)), "cudaMallocHost");
    blocks_.push_back(p);
  }
  void* slot = static_cast<uint8_t*>(blocks_[block]) + (next_ % kSlotsPerBlock) * kSlotBytes;
  ++next_;
  return slot;
}

namespace {

void require_bound(const Codec& codec) {
  CC_CHECK(!codec.unbound, "codec 'none' is unbound: bind it to a dtype first");
}

}  // namespace

void CudaBackend::launch_encode(const void* src, DType src_dtype, const void* wire_in, int64_t n,
                                const Codec& codec, float divisor, const EncodeContext& ctx,
                                void* dst) {
  require_bound(codec);
  device_ops(codec).encode(src, src_dtype, wire_in, n, codec, divisor, ctx, dst, streams_->codec());
}

void CudaBackend::launch_decode(const void* src, int64_t n, const Codec& codec,
                                const DecodeOut& o) {
  require_bound(codec);
  device_ops(codec).decode(src, n, codec, o, streams_->codec());
}

void CudaBackend::encode(const void* src, DType src_dtype, int64_t n, const Codec& codec,
                         float divisor, const EncodeContext& ctx, void* dst) {
  launch_encode(src, src_dtype, nullptr, n, codec, divisor, ctx, dst);
}

void CudaBackend::decode_accumulate(const void* src, int64_t n, const Codec& codec, float* acc,
                                    bool assign) {
  launch_decode(src, n, codec, decode_into(acc, assign));
}

void CudaBackend::decode(const void* src, int64_t n, const Codec& codec, void* out,
                         DType out_dtype) {
  require_bound(codec);
  if (n == 0) return;
  launch_decode(src, n, codec, decode_to(out, out_dtype));
}

void CudaBackend::load_accumulate(const void* src, DType src_dtype, int64_t n, float* acc,
                                  bool assign) {
  launch_accumulate(src, src_dtype, n, acc, assign, streams_->codec());
}

void CudaBackend::decode_reduce_encode(const void* src, const void* x, DType x_dtype, int64_t n,
                                       const Codec& codec, float divisor,
                                       const EncodeContext& ctx, void* dst) {
  require_bound(codec);
  if (n == 0) return;
  CC_CHECK(src != nullptr, "the hop's wire source is null");
  launch_encode(x, x_dtype, src, n, codec, divisor, ctx, dst);
}

void CudaBackend::finalize(const float* acc, int64_t n, float divisor, void* out,
                           DType out_dtype) {
  launch_cast(acc, DType::Float32, nullptr, DType::Float32, n, divisor, out, out_dtype,
              CastRounding{}, streams_->codec());
}

}  // namespace ccompress::cuda
