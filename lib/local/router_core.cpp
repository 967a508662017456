#include "local/router_core.hpp"

#include <boost/asio/ip/address.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>

namespace kubesandbox::local {

namespace {

std::string lower(std::string_view s) {
    std::string out(s);
    for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

// ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$, at most 63 characters.
bool dns_label(std::string_view s) {
    if (s.empty() || s.size() > 63) return false;
    for (char c : s) {
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
    }
    return s.front() != '-' && s.back() != '-';
}

// Constant-time comparison: the time taken does not tell how much of a guess was right.
bool same_secret(std::string_view a, std::string_view b) {
    unsigned char diff = a.size() == b.size() ? 0 : 1;
    for (std::size_t i = 0; i < a.size(); ++i)
        diff |= static_cast<unsigned char>(a[i] ^ b[i % (b.empty() ? 1 : b.size())]);
    return diff == 0 && !b.empty();
}

}  // namespace

std::optional<RouterRefusal> check_router_token(std::optional<std::string_view> authorization, std::string_view token) {
    if (token.empty()) return std::nullopt;
    constexpr std::string_view scheme = "bearer ";
    if (!authorization || authorization->size() <= scheme.size() ||
        lower(authorization->substr(0, scheme.size())) != scheme) {
        return RouterRefusal{401, "Missing or invalid Authorization header."};
    }
    if (!same_secret(trim(authorization->substr(scheme.size())), token)) return RouterRefusal{401, "Invalid token."};
    return std::nullopt;
}

RouterDecision route_sandbox_request(const RouterRequestHeaders& h, std::string_view token,
                                     std::chrono::milliseconds proxy_timeout) {
    auto refuse = [](unsigned status, std::string detail) {
        return RouterDecision{std::nullopt, RouterRefusal{status, std::move(detail)}};
    };
    if (auto refusal = check_router_token(h.authorization, token)) return {std::nullopt, refusal};
    RouterTarget target;
    if (!h.sandbox_id || h.sandbox_id->empty()) return refuse(400, "X-Sandbox-ID header is required.");
    if (!dns_label(*h.sandbox_id)) return refuse(400, "Invalid sandbox ID format.");
    target.sandbox_id = std::string(*h.sandbox_id);
    if (h.namespace_name) {
        if (!dns_label(*h.namespace_name)) return refuse(400, "Invalid namespace format.");
        target.namespace_name = std::string(*h.namespace_name);
    }
    if (h.port) {
        std::string text(trim(*h.port));
        char* end = nullptr;
        long port = text.empty() ? 0 : std::strtol(text.c_str(), &end, 10);
        if (text.empty() || *end || port < 1 || port > 65535) return refuse(400, "Invalid port format.");
        target.port = static_cast<std::uint16_t>(port);
    }
    if (h.pod_ip) {
        boost::system::error_code ec;
        auto address = boost::asio::ip::make_address(std::string(trim(*h.pod_ip)), ec);
        if (ec) return refuse(400, "Invalid target IP address format.");
        bool bad = address.is_loopback() || address.is_unspecified() || address.is_multicast() ||
                   (address.is_v4() && (address.to_v4().to_uint() & 0xFFFF0000u) == 0xA9FE0000u) ||
                   (address.is_v6() && address.to_v6().is_link_local());
        if (bad) return refuse(400, "Invalid target IP address.");
    }
    target.timeout = proxy_timeout;
    if (h.timeout) {
        std::string text(trim(*h.timeout));
        char* end = nullptr;
        double seconds = text.empty() ? 0 : std::strtod(text.c_str(), &end);
        if (!text.empty() && !*end && std::isfinite(seconds) && seconds > 0) {
            auto ms = std::chrono::milliseconds(static_cast<long long>(std::ceil(std::min(seconds, 1e9) * 1000)));
            target.timeout = std::min(ms, proxy_timeout);
        }
    }
    return {std::move(target), std::nullopt};
}

bool drop_request_header(std::string_view name, std::string_view connection) {
    std::string n = lower(name);
    if (n == "host" || n == "authorization" || n.rfind("x-sandbox-", 0) == 0) return true;
    if (drop_response_header(n)) return true;
    // Tokens of the Connection header name more hop-by-hop headers.
    std::string list = lower(connection);
    std::size_t start = 0;
    while (start <= list.size()) {
        auto comma = list.find(',', start);
        auto token =
            trim(std::string_view(list).substr(start, comma == std::string::npos ? std::string::npos : comma - start));
        if (!token.empty() && token == n) return true;
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return false;
}

bool drop_response_header(std::string_view name) {
    std::string n = lower(name);
    return n == "connection" || n == "keep-alive" || n.rfind("proxy-", 0) == 0 || n == "te" || n == "trailers" ||
           n == "transfer-encoding" || n == "upgrade";
}

std::string router_detail_body(std::string_view detail) {
    return boost::json::serialize(boost::json::object{{"detail", detail}});
}

}  // namespace kubesandbox::local
