#include "util/random.hpp"

#include <openssl/rand.h>
#include <openssl/sha.h>
#include <sys/random.h>

#include <pthread.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

namespace kubesandbox::util {

namespace {

constexpr const char* hex_digits = "0123456789abcdef";

// All `size` bytes from the kernel's CSPRNG, or false.
bool kernel_random(unsigned char* data, std::size_t size) {
    std::size_t got = 0;
    while (got < size) {
        ssize_t n = ::getrandom(data + got, size - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        got += static_cast<std::size_t>(n);
    }
    return true;
}

// Bumped in a forked child: its copy of a thread's pool is the parent's, so it must not be used.
std::atomic<unsigned> fork_generation{0};
const bool fork_handler_installed = [] {
    return ::pthread_atfork(nullptr, nullptr, [] { fork_generation.fetch_add(1, std::memory_order_relaxed); }) == 0;
}();

// A few bytes at a time (an execute's marker, a name) from a per-thread pool filled by one
// getrandom() per 512 bytes: a syscall per execute showed in its client CPU.
struct SmallPool {
    unsigned char bytes[512];
    std::size_t left = 0;
    unsigned generation = 0;
};

bool take_from_pool(unsigned char* data, std::size_t size) {
    constexpr std::size_t largest = 64;
    if (size > largest || !fork_handler_installed) return false;
    thread_local SmallPool pool;
    const unsigned generation = fork_generation.load(std::memory_order_relaxed);
    if (pool.generation != generation) {
        pool.left = 0;
        pool.generation = generation;
    }
    if (pool.left < size) {
        if (!kernel_random(pool.bytes, sizeof pool.bytes)) return false;
        pool.left = sizeof pool.bytes;
    }
    // Taken from the end, and wiped: no byte is handed out twice.
    unsigned char* from = pool.bytes + pool.left - size;
    std::memcpy(data, from, size);
    std::memset(from, 0, size);
    pool.left -= size;
    return true;
}

void fill_random(unsigned char* data, std::size_t size) {
    if (size == 0) return;
    if (take_from_pool(data, size)) return;
    // The kernel's CSPRNG first: one syscall, where OpenSSL's DRBG costs ~20 µs per call (locks,
    // per-thread set-up), which showed in every execute's marker.
    if (kernel_random(data, size)) return;
    if (RAND_bytes(data, static_cast<int>(size)) == 1) return;
    // OpenSSL's generator failing is near impossible; names must still be made.
    auto t = static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count());
    for (std::size_t i = 0; i < size; ++i) data[i] = static_cast<unsigned char>((t = t * 1103515245u + 12345u) >> 16);
}

std::string to_hex(const unsigned char* data, std::size_t size) {
    std::string out;
    out.reserve(size * 2);
    for (std::size_t i = 0; i < size; ++i) {
        out.push_back(hex_digits[data[i] >> 4]);
        out.push_back(hex_digits[data[i] & 15]);
    }
    return out;
}

}  // namespace

std::string random_hex(std::size_t bytes) {
    // Names and markers want a few bytes: those come from the stack.
    unsigned char small[32];
    std::vector<unsigned char> large(bytes > sizeof small ? bytes : 0);
    unsigned char* raw = bytes > sizeof small ? large.data() : small;
    fill_random(raw, bytes);
    return to_hex(raw, bytes);
}

std::string random_string(std::string_view alphabet, std::size_t length) {
    std::vector<unsigned char> raw(length);
    fill_random(raw.data(), raw.size());
    std::string out;
    out.reserve(length);
    for (unsigned char b : raw) out.push_back(alphabet[b % alphabet.size()]);
    return out;
}

std::string sha256_hex(std::string_view data, std::size_t chars) {
    unsigned char digest[SHA256_DIGEST_LENGTH];
    SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest);
    std::string out = to_hex(digest, sizeof digest);
    out.resize(std::min(chars, out.size()));
    return out;
}

}  // namespace kubesandbox::util
