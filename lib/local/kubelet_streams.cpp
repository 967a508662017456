// Answers on a stream request's connection (one-shot HTTP responses, the container an exec or
// log request names), and port-forward's entry.
#include "local/kubelet.hpp"

#include "local/kubelet_core.hpp"
#include "local/port_forward.hpp"
#include "proto/status.hpp"

#include <boost/beast/http/write.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>

namespace kubesandbox::local {

namespace kubelet_detail {

namespace http = boost::beast::http;

namespace {

std::vector<std::string> container_names(const json::object& pod) {
    std::vector<std::string> names;
    for (const auto& c : arr(obj(pod, "spec"), "containers")) {
        if (c.is_object()) names.push_back(str(c.get_object(), "name"));
    }
    return names;
}

}  // namespace

// Resolves the container of an exec/log request; on failure returns the 400 message.
std::optional<std::string> pick_container(const json::object& pod, bool has_container, std::string& container) {
    auto names = container_names(pod);
    std::string pod_name = str(obj(pod, "metadata"), "name");
    if (!has_container || container.empty()) {
        if (names.size() == 1) {
            container = names[0];
            return std::nullopt;
        }
        std::string list;
        for (const auto& n : names) list += (list.empty() ? "" : " ") + n;
        return "a container name must be specified for pod " + pod_name + ", choose one of: [" + list + "]";
    }
    if (std::find(names.begin(), names.end(), container) == names.end()) {
        return "container " + container + " is not valid for pod " + pod_name;
    }
    return std::nullopt;
}

asio::awaitable<void> write_response(net::AnyStream& stream, unsigned version, http::status status,
                                     std::string content_type, std::string body) {
    http::response<http::string_body> res{status, version};
    res.set(http::field::content_type, content_type);
    res.set(http::field::cache_control, "no-cache, private");
    res.keep_alive(false);
    res.body() = std::move(body);
    res.prepare_payload();
    auto [ec, n] = co_await http::async_write(stream, res, tuple_awaitable);
    (void)n;
    if (!ec) co_await stream.async_shutdown(tuple_awaitable);
    stream.close();
}

asio::awaitable<void> write_status(net::AnyStream& stream, unsigned version, unsigned code, std::string_view reason,
                                   std::string message) {
    co_await write_response(stream, version, static_cast<http::status>(code), "application/json",
                            json::serialize(proto::make_status(code, reason, message)));
}

}  // namespace kubelet_detail

using namespace kubelet_detail;

asio::awaitable<void> Kubelet::serve_portforward(StreamRequest request) {
    auto core = impl_->core;
    unsigned version = request.request.version();
    std::string uid = str(obj(request.pod, "metadata"), "uid");
    std::shared_ptr<PodRecord> pod;
    if (auto it = core->pods.find(uid); it != core->pods.end() && !it->second->removed) pod = it->second;
    if (!pod || !pod->running()) {
        co_await write_status(request.stream, version, 400, "BadRequest",
                              "pod " + str(obj(request.pod, "metadata"), "name") + " is not running");
        co_return;
    }
    co_await serve_port_forward(std::move(request), pod->inner_pid);
}

int Kubelet::network_pid(std::string_view namespace_name, std::string_view name) const {
    for (const auto& [uid, pod] : impl_->core->pods) {
        if (pod->ns == namespace_name && pod->name == name && !pod->removed && pod->running()) return pod->inner_pid;
    }
    return 0;
}

}  // namespace kubesandbox::local
