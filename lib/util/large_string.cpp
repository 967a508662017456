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

}  // namespace

void append_large(std::string& s, std::string_view data) {
    const std::size_t need = s.size() + data.size();
    if (need > s.capacity() && need >= large) {
        std::string bigger;
        bigger.reserve(std::max(need, s.capacity() * 2));
        advise_huge_pages(bigger.data(), bigger.capacity());
        bigger.append(s);
        s.swap(bigger);
    }
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
    append_large(s, data);
}

}  // namespace kubesandbox::util
