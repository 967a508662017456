// libFuzzer target: kubeconfig server / proxy URLs and NO_PROXY matching. Input: a URL, '\n',
// a NO_PROXY value, '\n', a host. Typed errors, nothing throws, and loopback always bypasses.
#include "proto/request.hpp"

#include <cstdint>
#include <cstdlib>
#include <string_view>

namespace proto = kubesandbox::proto;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string_view in(reinterpret_cast<const char*>(data), size);
    auto a = in.find('\n');
    auto url = in.substr(0, a);
    std::string_view rest = a == std::string_view::npos ? std::string_view() : in.substr(a + 1);
    auto b = rest.find('\n');
    auto no_proxy = rest.substr(0, b);
    std::string_view host = b == std::string_view::npos ? std::string_view() : rest.substr(b + 1);
    try {
        auto parsed = proto::parse_server_url(url);
        if (!parsed && parsed.error().message.empty()) std::abort();
        (void)proto::no_proxy_matches(no_proxy, host, "443");
        (void)proto::no_proxy_matches(no_proxy, host);
        if (proto::is_loopback_host(host) && !proto::no_proxy_matches("", host)) std::abort();
        (void)proto::url_encode(in);
    } catch (...) {
        std::abort();
    }
    return 0;
}
