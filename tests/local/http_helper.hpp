// A tiny blocking HTTP client for the local cluster tests (raw Beast over loopback, plain or TLS),
// independent of the project's KubeClient. Every socket has a receive timeout so no test hangs.
#pragma once

#include <kubesandbox/local_cluster.hpp>

#include <boost/json.hpp>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kubesandbox::test {

struct HttpResult {
    unsigned status = 0;
    std::string content_type;
    std::string body;
    std::map<std::string, std::string> headers;
    bool transport_error = false;  // connection dropped / incomplete response
    boost::json::value json() const;
    // The body as an object ({} when it is not one); the reference lives as long as this result.
    const boost::json::object& obj() const;

private:
    mutable std::optional<boost::json::object> parsed_;
};

struct HttpClient {
    explicit HttpClient(const LocalCluster& cluster) : cluster(cluster) {}
    const LocalCluster& cluster;
    bool send_token = true;
    std::string token_override;

    HttpResult request(const std::string& method, const std::string& target, const std::string& body = {},
                       const std::string& content_type = "application/json",
                       const std::vector<std::pair<std::string, std::string>>& headers = {});
    HttpResult get(const std::string& t) { return request("GET", t); }
    HttpResult post(const std::string& t, const boost::json::value& v) {
        return request("POST", t, boost::json::serialize(v));
    }
    HttpResult put(const std::string& t, const boost::json::value& v) {
        return request("PUT", t, boost::json::serialize(v));
    }
    HttpResult patch(const std::string& t, const boost::json::value& v, const std::string& ct) {
        return request("PATCH", t, boost::json::serialize(v), ct);
    }
    HttpResult del(const std::string& t, const std::string& body = {}) { return request("DELETE", t, body); }
};

// A watch held open on its own connection; lines are read on demand with a deadline.
class WatchStream {
public:
    WatchStream(const LocalCluster& cluster, const std::string& target);
    ~WatchStream();
    unsigned status() const;
    // The next event line as JSON, or null when the stream ended or `timeout_ms` passed.
    std::optional<boost::json::object> next(int timeout_ms = 5000);
    bool ended() const;
    // The stream ended without its terminating chunk (the connection was dropped).
    bool cut() const;

    struct Impl;

private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace kubesandbox::test
