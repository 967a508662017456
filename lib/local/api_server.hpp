// The local cluster's Kubernetes API server: HTTP/1.1 routing, discovery, CRUD, list/watch,
// patch, delete with garbage collection, and fault injection. Runs on one executor.
#pragma once

#include <kubesandbox/local_cluster.hpp>

#include "net/any_stream.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kubesandbox::local {

class Kubelet;

// Fault rules shared with LocalCluster::add_fault (any thread).
class FaultList {
public:
    void add(FaultRule rule);
    void clear();
    // The rule that applies to this request (its count is consumed), if any.
    std::optional<FaultRule> take(std::string_view method, std::string_view target);
    std::size_t applied() const { return applied_.load(); }

private:
    std::mutex mutex_;
    std::vector<FaultRule> rules_;
    std::atomic<std::size_t> applied_{0};
};

struct ApiServerOptions {
    std::string token;
    bool allow_anonymous = false;  // requests without an Authorization header are accepted
    std::chrono::seconds continue_token_ttl{300};
    std::string server_address;  // host:port for /api serverAddressByClientCIDRs
};

class ApiServer {
public:
    ApiServer(boost::asio::any_io_executor executor, ApiServerOptions options, FaultList& faults);
    ~ApiServer();

    void set_kubelet(Kubelet* kubelet);
    void set_server_address(std::string address);

    // Serves one accepted (and, for TLS, handshaken) connection until it closes.
    boost::asio::awaitable<void> serve(net::AnyStream stream);

    // The kubelet's PodStatusWriter.
    void write_pod_status(const std::string& ns, const std::string& name, const std::string& uid,
                          boost::json::object status);

    void expire_continue_tokens();
    void expire_watches();
    std::size_t open_watches(std::string_view plural) const;  // on the server's executor
    void shutdown();                                          // ends every watch, closes every connection
    std::size_t open_connections() const;

    struct Impl;

private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace kubesandbox::local
