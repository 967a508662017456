// The minimal HTTP peer of the router scenarios: blocking POSIX sockets, one keep-alive
// connection, a prebuilt request, responses read by Content-Length and not parsed.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

namespace kubesandbox::bench {

// Returns false on any failure.
class MinimalClient {
public:
    MinimalClient(const std::string& host, int port) {
        fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_port = htons(static_cast<std::uint16_t>(port));
        ::inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
        if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
            last_head = "connect to " + host + ":" + std::to_string(port) + ": " + std::strerror(errno);
            ::close(fd_);
            fd_ = -1;
        }
        int one = 1;
        if (fd_ >= 0) ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    MinimalClient(const MinimalClient&) = delete;
    MinimalClient& operator=(const MinimalClient&) = delete;
    ~MinimalClient() {
        if (fd_ >= 0) ::close(fd_);
    }
    // Sends `request`, reads one response; its body size in `body_bytes`.
    bool round_trip(const std::string& request, std::size_t& body_bytes) {
        if (fd_ < 0) return false;
        for (std::size_t off = 0; off < request.size();) {
            auto n = ::send(fd_, request.data() + off, request.size() - off, MSG_NOSIGNAL);
            if (n <= 0) {
                last_head = std::string("send: ") + std::strerror(errno);
                return false;
            }
            off += static_cast<std::size_t>(n);
        }
        std::string head;
        char buf[65536];
        std::size_t header_end = std::string::npos;
        while (header_end == std::string::npos) {
            auto n = ::recv(fd_, buf, sizeof buf, 0);
            if (n <= 0) {
                last_head = "recv: " + std::string(n == 0 ? "closed" : std::strerror(errno)) + " after " + head;
                return false;
            }
            head.append(buf, static_cast<std::size_t>(n));
            header_end = head.find("\r\n\r\n");
        }
        auto cl = head.find("Content-Length: ");
        if (cl == std::string::npos) cl = head.find("content-length: ");
        if (cl == std::string::npos || cl > header_end) return false;
        std::size_t length = std::stoull(head.substr(cl + 16));
        std::size_t have = head.size() - header_end - 4;
        while (have < length) {
            auto n = ::recv(fd_, buf, std::min(sizeof buf, length - have), 0);
            if (n <= 0) return false;
            have += static_cast<std::size_t>(n);
        }
        body_bytes = length;
        last_head = head.substr(0, header_end);
        return head.compare(0, 12, "HTTP/1.1 200") == 0;
    }

private:
    int fd_ = -1;

public:
    std::string last_head;  // of the last response (or what failed), for messages
};

}  // namespace kubesandbox::bench
