// The messages between the local kubelet and a pod's spawner (kubesandbox-enter --serve), over a
// SOCK_SEQPACKET socket pair: one message per datagram, so no framing can get out of step.
//
//   kubelet -> spawner  a command: its id, then its argv as NUL-terminated strings, with the
//                       command's stdin, stdout and stderr attached (SCM_RIGHTS, in that order)
//   spawner -> kubelet  the id of a command that ended and its wait status; id 0 once, when the
//                       spawner is ready to serve
//
// Both sides are small: the spawner is a static program that avoids the C++ runtime on its path,
// so this header holds only plain functions over bytes.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kubesandbox::local::spawn_protocol {

inline constexpr std::uint32_t kVersion = 1;
// A command's message, header included, stays below this: larger commands (rare: a command line
// of tens of kilobytes) are started the way they were before a spawner existed.
inline constexpr std::size_t kMaxRequest = 60 * 1024;
inline constexpr std::size_t kRequestHeader = 16;  // version, reserved, id
inline constexpr std::size_t kReplySize = 16;      // id, wait status, reserved
inline constexpr int kStdioCount = 3;

struct Request {
    std::uint64_t id = 0;
    std::vector<std::string_view> argv;  // views into the message
};

struct Reply {
    std::uint64_t id = 0;
    int wait_status = 0;
};

namespace detail {
inline void put32(std::string& out, std::uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); }
inline void put64(std::string& out, std::uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }
inline std::uint32_t get32(const char* p) {
    std::uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}
inline std::uint64_t get64(const char* p) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
}
}  // namespace detail

// The message for a command, or nullopt when it has no argv, an element holds a NUL, or it would
// not fit in kMaxRequest. Native byte order: both ends are on one machine.
inline std::optional<std::string> encode_request(std::uint64_t id, const std::vector<std::string>& argv) {
    if (argv.empty()) return std::nullopt;
    std::size_t size = kRequestHeader;
    for (const auto& a : argv) {
        if (a.find('\0') != std::string::npos) return std::nullopt;
        size += a.size() + 1;
        if (size > kMaxRequest) return std::nullopt;
    }
    std::string out;
    out.reserve(size);
    detail::put32(out, kVersion);
    detail::put32(out, 0);
    detail::put64(out, id);
    for (const auto& a : argv) {
        out += a;
        out.push_back('\0');
    }
    return out;
}

// The command in a message; nullopt for anything but a well-formed message of this version.
inline std::optional<Request> decode_request(std::string_view message) {
    if (message.size() <= kRequestHeader || message.size() > kMaxRequest) return std::nullopt;
    if (detail::get32(message.data()) != kVersion) return std::nullopt;
    if (message.back() != '\0') return std::nullopt;
    Request r;
    r.id = detail::get64(message.data() + 8);
    if (r.id == 0) return std::nullopt;  // 0 is the ready message's
    std::string_view rest = message.substr(kRequestHeader);
    while (!rest.empty()) {
        std::size_t end = rest.find('\0');
        r.argv.push_back(rest.substr(0, end));
        rest.remove_prefix(end + 1);
    }
    return r;
}

// The id a message claims, if it is long enough to carry one (to answer even a malformed one).
inline std::optional<std::uint64_t> request_id(std::string_view message) {
    if (message.size() < kRequestHeader) return std::nullopt;
    std::uint64_t id = detail::get64(message.data() + 8);
    if (id == 0) return std::nullopt;
    return id;
}

inline std::string encode_reply(std::uint64_t id, int wait_status) {
    std::string out;
    out.reserve(kReplySize);
    detail::put64(out, id);
    detail::put32(out, static_cast<std::uint32_t>(wait_status));
    detail::put32(out, 0);
    return out;
}

inline std::optional<Reply> decode_reply(std::string_view message) {
    if (message.size() != kReplySize) return std::nullopt;
    Reply r;
    r.id = detail::get64(message.data());
    r.wait_status = static_cast<int>(detail::get32(message.data() + 8));
    return r;
}

}  // namespace kubesandbox::local::spawn_protocol
