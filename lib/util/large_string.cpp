#include "util/large_string.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>

namespace kubesandbox::util {

namespace {

constexpr std::size_t huge_page = std::size_t{2} << 20;
constexpr std::size_t large = std::size_t{4} << 20;  // below this, plain appends

// Advice only: the whole 2 MiB pages inside [p, p + n); a failure changes nothing but speed.
void advise_huge_pages(char* p, std::size_t n) {
    const auto begin = (reinterpret_cast<std::uintptr_t>(p) + huge_page - 1) & ~(huge_page - 1);
    const auto end = (reinterpret_cast<std::uintptr_t>(p) + n) & ~(huge_page - 1);
    if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

constexpr std::size_t largest_reserve = std::size_t{1} << 30;

// Moves `s` into a buffer of `capacity` bytes, marked before a page of it is touched.
void regrow(std::string& s, std::size_t capacity) {
    std::string bigger;
    bigger.reserve(capacity);
    advise_huge_pages(bigger.data(), bigger.capacity());
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
    // download spends its CPU on here (sometimes 3x more, when the VM's host backs them late).
    const std::size_t need = s.size() + data.size();
    if (need > s.capacity() && need >= large && cap <= largest_reserve) regrow(s, cap);
    append_large(s, data);
}

}  // namespace kubesandbox::util
