// Device or pinned host memory blocks kept for reuse instead of freed, for a library that allocates and frees as it
// goes (nvJPEG's batched decode): cudaFree and cudaFreeHost wait for the whole device, every stream's queued work,
// so a free inside a decode call stalls the call behind the training step. A released block is handed out again
// once an event recorded on the releasing stream has passed, since the work queued before the release may still
// read or write it. Sizes round up to powers of two, so a block serves later requests of its class; nothing is
// freed before the cache is destroyed. Header-only and free of LibTorch, so the nvJPEG probe measures this code.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace trainer {

class EventBlockCache {
 public:
  enum class Kind { device, pinned };
  struct Stats {
    long allocated = 0;  // blocks taken from CUDA
    long reused = 0;     // requests served from the cache
    size_t bytes = 0;    // held in all
  };

  explicit EventBlockCache(Kind kind) : kind_(kind) {}
  EventBlockCache(const EventBlockCache&) = delete;
  EventBlockCache& operator=(const EventBlockCache&) = delete;
  // Waits for the work behind each release, then frees: destroy it only once nothing else uses its blocks.
  ~EventBlockCache() {
    for (Block& b : blocks_) {
      cudaEventSynchronize(b.done);
      cudaEventDestroy(b.done);
      if (kind_ == Kind::device)
        cudaFree(b.ptr);
      else
        cudaFreeHost(b.ptr);
    }
  }

  // nullptr where CUDA cannot provide the memory. The device is the calling thread's current one.
  void* allocate(size_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    const size_t size = round_up(n);
    Block* best = nullptr;
    for (Block& b : blocks_)
      if (!b.used && b.size >= size && (!best || b.size < best->size) && cudaEventQuery(b.done) == cudaSuccess)
        best = &b;
    if (best) {
      best->used = true;
      ++stats_.reused;
      return best->ptr;
    }
    Block b{nullptr, size, nullptr, true};
    const cudaError_t e = kind_ == Kind::device ? cudaMalloc(&b.ptr, size) : cudaHostAlloc(&b.ptr, size, 0);
    if (e != cudaSuccess) return nullptr;
    if (cudaEventCreateWithFlags(&b.done, cudaEventDisableTiming) != cudaSuccess) {
      kind_ == Kind::device ? cudaFree(b.ptr) : cudaFreeHost(b.ptr);
      return nullptr;
    }
    index_[b.ptr] = blocks_.size();
    blocks_.push_back(b);
    ++stats_.allocated;
    stats_.bytes += size;
    return b.ptr;
  }

  // False for a pointer this cache did not hand out.
  bool release(void* p, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = index_.find(p);
    if (it == index_.end()) return false;
    Block& b = blocks_[it->second];
    b.used = false;
    return cudaEventRecord(b.done, stream) == cudaSuccess;
  }

  Stats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

 private:
  struct Block {
    void* ptr;
    size_t size;
    cudaEvent_t done;  // recorded on the releasing stream
    bool used;
  };
  static size_t round_up(size_t n) {
    size_t s = size_t(1) << 16;
    while (s < n) s <<= 1;
    return s;
  }

  const Kind kind_;
  mutable std::mutex mu_;
  std::vector<Block> blocks_;
  std::unordered_map<void*, size_t> index_;
  Stats stats_;
};

}  // namespace trainer
