// The local cluster's kubelet: runs each pod's container as bubblewrap-isolated local processes
// and serves the streaming subresources (exec, portforward, log). Private to the local cluster.
// Everything here runs on the cluster's single-threaded executor.
#pragma once

#include <kubesandbox/logger.hpp>

#include "net/any_stream.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/json/object.hpp>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>

namespace kubesandbox::local {

// Writes a pod's new status into the store (bumping resourceVersion, notifying watchers).
// Arguments: namespace, name, uid, the complete new `status` object. Ignored if the pod with
// that uid no longer exists.
using PodStatusWriter = std::function<void(const std::string& ns, const std::string& name, const std::string& uid,
                                           boost::json::object status)>;

struct KubeletOptions {
    std::filesystem::path data_dir;             // pods' working directories live below it
    std::map<std::string, std::string> images;  // see LocalClusterOptions::images
    bool allow_no_isolation = false;
    std::string bwrap_program = "bwrap";    // see LocalClusterOptions::bwrap_program
    std::int64_t pod_pids_limit = 4096;     // processes per pod (a node's podPidsLimit), with cgroups
    std::filesystem::path runtime_program;  // kubesandbox-runtime, for runtime images; empty = none
    std::filesystem::path enter_program;    // kubesandbox-enter; empty = look for it (see find_enter_program)
    bool exec_spawner = true;               // see LocalClusterOptions::exec_spawner
    // How often a pod with an ephemeral-storage limit or an emptyDir sizeLimit is measured.
    std::chrono::milliseconds storage_check_interval{2000};
    Logger logger{};
};

// One request the API server has authenticated and routed to a pod subresource. The kubelet
// owns the connection from here on (WebSocket/SPDY upgrade or a plain HTTP response).
struct StreamRequest {
    net::AnyStream stream;
    boost::beast::flat_buffer buffer;  // bytes the server read past the request head
    boost::beast::http::request<boost::beast::http::string_body> request;
    boost::json::object pod;  // the pod as stored
};

// Why pods could not use `data_dir` (empty when they can): run as root, the kubelet starts pods
// as an unprivileged host uid, which must be able to pass through every folder above it.
std::string data_dir_problem(const std::filesystem::path& data_dir);

class Kubelet {
public:
    Kubelet(boost::asio::any_io_executor executor, KubeletOptions options, PodStatusWriter status_writer);
    ~Kubelet();  // kills every pod process

    // Whether bubblewrap can create namespaces here; when not, problem() says why and pods fail
    // (status Failed with a clear message) unless allow_no_isolation was set.
    bool isolation_available() const;
    const std::string& isolation_problem() const;
    // How resources.limits are enforced ("cgroup v1" or "cgroup v2"); "" when they are not, and
    // limits_problem() says why.
    std::string limits_mode() const;
    const std::string& limits_problem() const;

    // The API server calls these after each committed change to a pod.
    void pod_changed(const boost::json::object& pod);  // created or updated (incl. deletionTimestamp)
    void pod_deleted(const boost::json::object& pod);  // gone from the store: kill, clean up

    boost::asio::awaitable<void> serve_exec(StreamRequest request);
    boost::asio::awaitable<void> serve_portforward(StreamRequest request);

    // A process in the network namespace of the running pod ns/name (for connect_in_pod), or 0
    // when no such pod runs. On the kubelet's executor.
    int network_pid(std::string_view namespace_name, std::string_view name) const;
    boost::asio::awaitable<void> serve_log(StreamRequest request);

    // Kills every pod process and waits for them; used by LocalCluster::stop().
    void shutdown();

    struct Impl;

private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace kubesandbox::local
