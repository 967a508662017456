// Live heap bytes allocated through operator new by the calling thread, for memory-per-object
// rows: exact where mallinfo is blurred by freed chunks the allocator keeps, and blind to the
// cluster's own thread in this process.
#include "support.hpp"

#include <malloc.h>

#include <cstdlib>
#include <new>

#if defined(__SANITIZE_ADDRESS__)

// AddressSanitizer owns operator new and delete (and checks they pair up): nothing is counted.
namespace kubesandbox::bench {
long long thread_heap_bytes() { return -1; }
void reset_thread_heap_peak() {}
long long thread_heap_peak_bytes() { return -1; }
}  // namespace kubesandbox::bench

#else

namespace {
thread_local long long live_bytes = 0;
thread_local long long peak_bytes = 0;
}  // namespace

namespace kubesandbox::bench {
long long thread_heap_bytes() { return live_bytes; }
void reset_thread_heap_peak() { peak_bytes = live_bytes; }
long long thread_heap_peak_bytes() { return peak_bytes; }
}  // namespace kubesandbox::bench

void* operator new(std::size_t n) {
    void* p = std::malloc(n ? n : 1);
    if (!p) throw std::bad_alloc();
    live_bytes += static_cast<long long>(malloc_usable_size(p));
    if (live_bytes > peak_bytes) peak_bytes = live_bytes;
    return p;
}

void operator delete(void* p) noexcept {
    if (!p) return;
    live_bytes -= static_cast<long long>(malloc_usable_size(p));
    std::free(p);
}

void operator delete(void* p, std::size_t) noexcept { operator delete(p); }

#endif
