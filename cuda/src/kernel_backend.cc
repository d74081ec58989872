#include "ccompress/kernel_backend.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <new>

namespace ccompress {

void* KernelBackend::workspace(int64_t bytes) {
  CC_CHECK(bytes >= 0, "workspace of " << bytes << " bytes");
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  thread_local std::unique_ptr<void, Free> block;
  thread_local int64_t capacity = 0;
  if (bytes > capacity || !block) {
    const int64_t want = std::max<int64_t>(align_up(bytes, 256), 256);
    block.reset();  // release the old block before taking the larger one
    block.reset(std::aligned_alloc(256, static_cast<size_t>(want)));
    if (!block) throw std::bad_alloc();
    capacity = want;
  }
  return block.get();
}

}  // namespace ccompress
