// libFuzzer target: the address of a Gateway from its status (connection/gateway_address.hpp).
// Input layout: byte 0 picks the port argument and the listener protocol; the rest is (a) a host
// for usable_host, (b) split at NUL bytes into status.addresses[].value of a Gateway built here,
// with listeners, and (c) parsed as a Gateway in JSON. Properties, each checked with std::abort():
// nothing throws; an accepted host is 1-253 bytes with no '/', '?', '#', '@', '%', whitespace or
// control byte, and a ':' only in an IPv6 literal; gateway_address picks the first usable value
// (or fails with service_unavailable when there is none), the port given, else the first
// listener's port for the protocol that is in range, else 80/443; authority() brackets IPv6.
#include "connection/gateway_address.hpp"

#include <boost/asio/ip/address.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace ks = kubesandbox;
namespace json = boost::json;

void check_host(std::string_view host) {
    if (!ks::usable_host(host)) return;
    if (host.empty() || host.size() > 253) std::abort();
    for (char c : host) {
        const auto u = static_cast<unsigned char>(c);
        if (std::iscntrl(u) || std::isspace(u) || u >= 0x80 || c == '/' || c == '?' || c == '#' || c == '@' ||
            c == '%' || c == '[' || c == ']')
            std::abort();
    }
    boost::system::error_code ec;
    const auto address = boost::asio::ip::make_address(std::string(host), ec);
    if (host.find(':') != std::string_view::npos && (ec || !address.is_v6())) std::abort();
    if (ec && host.find_first_not_of("0123456789abcdefABCDEF.") == std::string_view::npos) std::abort();
}

void check_result(const ks::Result<ks::GatewayAddress>& r, const std::vector<std::string>& values,
                  std::optional<std::uint16_t> port) {
    std::optional<std::string> first;
    for (const auto& v : values) {
        if (ks::usable_host(v)) {
            first = v;
            break;
        }
    }
    if (!r) {
        if (first || !r.error().is(ks::errc::service_unavailable) || r.error().message.empty()) std::abort();
        return;
    }
    if (!first || r->host != *first) std::abort();
    if (port && r->port != *port) std::abort();
    if (!port && r->port == 0) std::abort();
    const std::string authority = ks::authority(*r);
    const bool v6 = r->host.find(':') != std::string::npos;
    const std::string expected =
        (v6 ? "[" + r->host + "]" : r->host) + ":" + std::to_string(static_cast<unsigned>(r->port));
    if (authority != expected) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    const std::optional<std::uint16_t> port =
        data[0] & 1 ? std::optional<std::uint16_t>(static_cast<std::uint16_t>(data[0] * 257)) : std::nullopt;
    const std::string_view protocol = data[0] & 2 ? "HTTPS" : "HTTP";
    const std::string_view in(reinterpret_cast<const char*>(data + 1), size - 1);
    try {
        // (a) The rest as one host.
        check_host(in);

        // (b) The rest as the values of status.addresses.
        std::vector<std::string> values;
        json::array addresses;
        for (std::size_t start = 0;;) {
            const std::size_t nul = in.find('\0', start);
            values.emplace_back(in.substr(start, nul == std::string_view::npos ? std::string_view::npos : nul - start));
            check_host(values.back());
            addresses.push_back(
                json::object{{"type", values.size() % 2 ? "IPAddress" : "Hostname"}, {"value", values.back()}});
            if (nul == std::string_view::npos) break;
            start = nul + 1;
        }
        json::object gateway{{"metadata", {{"name", "gw"}}},
                             {"spec",
                              {{"listeners", json::array{{{"name", "tls"}, {"protocol", "TLS"}, {"port", 9443}},
                                                         {{"name", "big"}, {"protocol", protocol}, {"port", 70000}},
                                                         {{"name", "web"}, {"protocol", protocol}, {"port", 8080}}}}}},
                             {"status", {{"addresses", addresses}}}};
        const auto r = ks::gateway_address(gateway, port, protocol);
        check_result(r, values, port);
        if (r && !port && r->port != 8080) std::abort();

        // (c) The rest as a Gateway in JSON.
        boost::system::error_code ec;
        const json::value v = json::parse(in, ec);
        if (!ec && v.is_object()) {
            std::vector<std::string> seen;
            const json::value* status = v.get_object().if_contains("status");
            const json::value* list =
                status && status->is_object() ? status->get_object().if_contains("addresses") : nullptr;
            if (list && list->is_array()) {
                for (const auto& a : list->get_array()) {
                    if (!a.is_object()) continue;
                    const json::value* value = a.get_object().if_contains("value");
                    seen.emplace_back(value && value->is_string() ? std::string(value->get_string()) : std::string());
                }
            }
            const auto parsed = ks::gateway_address(v.get_object(), port, protocol);
            check_result(parsed, seen, port);
            if (parsed) check_host(parsed->host);
        }
    } catch (...) {
        std::abort();  // nothing here may throw
    }
    return 0;
}
