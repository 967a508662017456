// The local cluster's sandbox router: agent-sandbox's sandbox-router on a loopback port. It takes
// a request with X-Sandbox-ID / -Namespace / -Port, finds the sandbox's pod (named like the
// Sandbox) and relays the request to that port inside the pod's network namespace, streaming
// the request body there and the response back. Header rules live in router_core.hpp.
#pragma once

#include <kubesandbox/error.hpp>

#include <boost/asio/any_io_executor.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace kubesandbox::local {

struct RouterOptions {
    std::string token;  // required as a bearer token when non-empty (/healthz is exempt)
    std::chrono::milliseconds proxy_timeout{std::chrono::seconds(180)};
    std::uint64_t max_request_body = 0;  // 0: no limit (bodies are relayed as they arrive, not held)
    std::chrono::milliseconds delay{0};  // added before relaying each request (tests: a slow router)
};

// (namespace, sandbox name) -> a process in the pod's network namespace, 0 when not running.
using PodResolver = std::function<int(std::string_view, std::string_view)>;

class SandboxRouter {
public:
    SandboxRouter(boost::asio::any_io_executor executor, RouterOptions options, PodResolver resolver);
    ~SandboxRouter();

    // Listens on address:port (0 = any free port) and serves until stop(); the bound port.
    Result<std::uint16_t> start(const std::string& address, std::uint16_t port);
    // Closes the listener and every connection. On the executor.
    void stop();

    struct Impl;

private:
    std::shared_ptr<Impl> impl_;
};

}  // namespace kubesandbox::local
