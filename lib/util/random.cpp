#include "util/random.hpp"

#include <openssl/rand.h>
#include <openssl/sha.h>
#include <sys/random.h>

#include <cerrno>
#include <chrono>
#include <vector>

namespace kubesandbox::util {

namespace {

constexpr const char* hex_digits = "0123456789abcdef";

void fill_random(unsigned char* data, std::size_t size) {
    if (size == 0) return;
    // The kernel's CSPRNG first: one syscall, where OpenSSL's DRBG costs ~20 µs per call (locks,
    // per-thread set-up), which showed in every execute's marker.
    std::size_t got = 0;
    while (got < size) {
        ssize_t n = ::getrandom(data + got, size - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += static_cast<std::size_t>(n);
    }
    if (got == size) return;
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
