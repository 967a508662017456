// The embedded local cluster: a Kubernetes API server emulator on loopback whose pods are
// bubblewrap-isolated local processes. Runs on its own thread; kubectl works against it.
#pragma once

#include <kubesandbox/error.hpp>
#include <kubesandbox/kube_config.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>

namespace kubesandbox {

struct LocalClusterOptions {
    std::string bind_address = "127.0.0.1";  // loopback unless told otherwise
    std::uint16_t port = 0;                   // 0 = a free port
    bool tls = true;                          // HTTPS with a generated CA; false = plain HTTP
    std::filesystem::path data_dir{};           // empty = a temporary directory removed on stop
    std::string token{};                        // bearer token; empty = random
    std::chrono::seconds continue_token_ttl{300};
    // Run pods without bubblewrap namespaces when bwrap cannot create them. Loudly unsafe.
    bool allow_no_isolation = false;
    // Image name (exact, or a prefix ending in '*', e.g. "python:*") -> root filesystem:
    // "host" = the host's userland read-only, "busybox" = a minimal busybox root, or a directory.
    std::map<std::string, std::string> images{};
};

// Faults injected into API responses, for tests. Thread-safe.
struct FaultRule {
    std::string path_contains;       // applies to requests whose target contains this ("" = all)
    std::string method{};              // "" = any
    int count = 1;                   // how many requests it hits; -1 = until cleared
    enum class Action { status, drop_before_response, drop_mid_body, latency } action = Action::status;
    unsigned status = 500;           // for Action::status
    std::optional<int> retry_after_seconds{};
    std::chrono::milliseconds latency{0};
};

class LocalCluster {
public:
    static Result<std::unique_ptr<LocalCluster>> start(LocalClusterOptions options = {});
    ~LocalCluster();  // stops; no pod process survives
    void stop();

    std::string url() const;
    std::uint16_t port() const;
    const std::string& token() const;
    const std::string& ca_pem() const;        // empty for plain HTTP
    bool isolation_available() const;

    KubeConfig kube_config(std::string namespace_name = "default") const;
    Result<void> write_kubeconfig(const std::filesystem::path& path) const;

    void add_fault(FaultRule rule);
    void clear_faults();
    void expire_continue_tokens();  // every outstanding continue token now yields 410
    void expire_watches();          // every open watch gets an ERROR 410 and ends

    struct Impl;

private:
    explicit LocalCluster(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_{};
};

}  // namespace kubesandbox
