#include "util/large_string.hpp"

#include <algorithm>

namespace kubesandbox::util {

namespace {

constexpr std::size_t large = std::size_t{4} << 20;  // below this, plain appends

constexpr std::size_t largest_reserve = std::size_t{1} << 30;

// Moves `s` into a buffer of `capacity` bytes. No MADV_HUGEPAGE: where THP is `madvise` (as on
// our machines), a fault in such a region may compact memory on the spot, and one 100 MB download in
// three or four then cost 250-440 ms of system time instead of ~100 ms.
void regrow(std::string& s, std::size_t capacity) {
    std::string bigger;
    bigger.reserve(capacity);
    bigger.append(s);
    s.swap(bigger);
}

}  // namespace

void append_large(std::string& s, std::string_view data) {
    const std::size_t need = s.size() + data.size();
    if (need > s.capacity() && need >= large) regrow(s, std::max(need, s.capacity() * 2));
    s.append(data);
}

void append_capped(std::string& s, std::string_view data, std::size_t cap, bool& truncated) {
    if (data.empty()) return;
    if (s.size() >= cap) {
        truncated = true;
        return;
    }
    const std::size_t room = cap - s.size();
    if (data.size() > room) {
        truncated = true;
        data = data.substr(0, room);
    }
    // Past a few MiB a capped string takes its whole cap (up to 1 GiB) at once: reserved, not
    // touched, so only the bytes that arrive cost memory, and none is copied again. Geometric
    // growth touched 2.2x the output's size in fresh pages, and fresh pages are what a large
    // download spends most of its CPU on.
    const std::size_t need = s.size() + data.size();
    if (need > s.capacity() && need >= large && cap <= largest_reserve) regrow(s, cap);
    append_large(s, data);
}

}  // namespace kubesandbox::util
