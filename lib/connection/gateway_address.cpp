#include "connection/gateway_address.hpp"

#include "util/json_access.hpp"

#include <boost/asio/ip/address.hpp>
#include <boost/json/array.hpp>

#include <cctype>

namespace kubesandbox {

namespace json = boost::json;

namespace {

bool hex_digit(char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }

bool plain_hostname(std::string_view name) {
    if (name.empty() || name.size() > 253) return false;
    bool all_numeric_or_hex = true;
    std::size_t start = 0;
    for (;;) {
        std::size_t dot = name.find('.', start);
        std::string_view label =
            name.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
        if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') return false;
        bool label_hex = true;
        for (char c : label) {
            if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
            if (!hex_digit(c)) label_hex = false;
        }
        if (!label_hex) all_numeric_or_hex = false;
        if (dot == std::string_view::npos) break;
        start = dot + 1;
    }
    return !all_numeric_or_hex;
}

}  // namespace

bool usable_host(std::string_view value) {
    if (value.empty() || value.size() > 253) return false;
    // (inet_pton would read "1.2.3.4\0junk" as 1.2.3.4.)
    for (char c : value)
        if (std::iscntrl(static_cast<unsigned char>(c)) || c == ' ') return false;
    boost::system::error_code ec;
    boost::asio::ip::make_address(std::string(value), ec);
    // A scoped IPv6 address ("fe80::1%eth0") names an interface of the gateway's host, not ours.
    if (!ec) return value.find('%') == std::string_view::npos;
    return plain_hostname(value);
}

Result<GatewayAddress> gateway_address(const json::object& gateway, std::optional<std::uint16_t> port,
                                       std::string_view protocol) {
    const std::string name = util::string_at(util::metadata_of(gateway), "name");
    GatewayAddress chosen;
    bool found = false;
    std::string refused;
    const json::object* status = util::object_at(gateway, "status");
    if (const json::array* addresses = status ? util::array_at(*status, "addresses") : nullptr) {
        for (const auto& a : *addresses) {
            if (!a.is_object()) continue;
            std::string value = util::string_at(a.get_object(), "value");
            if (usable_host(value)) {
                chosen.host = std::move(value);
                found = true;
                break;
            }
            if (refused.empty()) refused = value;
        }
    }
    if (!found) {
        std::string why = refused.empty() ? "has no address in its status yet"
                                          : "publishes no usable address (refused: '" + refused + "')";
        return fail(errc::service_unavailable, "gateway " + name + " " + why);
    }
    if (port) {
        chosen.port = *port;
        return chosen;
    }
    chosen.port = protocol == "HTTPS" ? 443 : 80;
    const json::object* spec = util::object_at(gateway, "spec");
    if (const json::array* listeners = spec ? util::array_at(*spec, "listeners") : nullptr) {
        for (const auto& l : *listeners) {
            if (!l.is_object() || util::string_at(l.get_object(), "protocol") != protocol) continue;
            const json::value* p = l.get_object().if_contains("port");
            if (p && p->is_int64() && p->get_int64() > 0 && p->get_int64() <= 65535) {
                chosen.port = static_cast<std::uint16_t>(p->get_int64());
                break;
            }
        }
    }
    return chosen;
}

std::string authority(const GatewayAddress& address) {
    bool v6 = address.host.find(':') != std::string::npos;
    return (v6 ? "[" + address.host + "]" : address.host) + ":" + std::to_string(address.port);
}

}  // namespace kubesandbox
