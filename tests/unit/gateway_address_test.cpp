// Where a Gateway is reached, from its status and listeners (sans-IO).
#include "connection/gateway_address.hpp"

#include <boost/json/parse.hpp>

#include <gtest/gtest.h>

namespace {
using namespace kubesandbox;

boost::json::object gateway(const char* text) { return boost::json::parse(text).as_object(); }

TEST(GatewayAddress, UsableHostsAreIpLiteralsAndPlainHostnames) {
    for (const char* ok : {"10.0.0.7", "127.0.0.1", "::1", "2001:db8::5", "router.example.com", "gw-1.internal",
                           "localhost", "a1b2c3g.example"})
        EXPECT_TRUE(usable_host(ok)) << ok;
    for (const char* bad :
         {"",         "1.2.3.4/x", "user@host",  "host:80",      "host?q",    "host#f",    "a..b",         ".a",
          "a.",       "-a.b",      "a-.b",       "with space",   "tab\tname", "new\nline", "fe80::1%eth0", "1.2.3",
          "deadbeef", "cafe.1234", "10.0.0.256", "*.example.com"})
        EXPECT_FALSE(usable_host(bad)) << bad;
    EXPECT_FALSE(usable_host(std::string(64, 'a') + ".example"));  // a label over 63
    EXPECT_FALSE(usable_host(std::string("a\0b", 3)));
    EXPECT_FALSE(usable_host(std::string("1.2.3.4\0x", 9)));
}

TEST(GatewayAddress, TakesTheFirstUsableAddressWhateverItsType) {
    auto gw = gateway(R"({"metadata":{"name":"gw"},"status":{"addresses":[
        {"type":"Hostname","value":"user@evil"},{"value":"cafe.be"},
        {"type":"example.com/custom","value":"2001:db8::9"},{"type":"IPAddress","value":"10.1.2.3"}]}})");
    auto a = gateway_address(gw, std::nullopt, "HTTP");
    ASSERT_TRUE(a) << a.error().describe();
    EXPECT_EQ(a->host, "2001:db8::9");
    EXPECT_EQ(a->port, 80);
    EXPECT_EQ(authority(*a), "[2001:db8::9]:80");
}

TEST(GatewayAddress, ThePortIsGivenOrTheFirstListenerOfTheProtocol) {
    auto gw = gateway(R"({"metadata":{"name":"gw"},
        "spec":{"listeners":[{"name":"tls","protocol":"HTTPS","port":8443},{"name":"web","protocol":"HTTP","port":8080},
                             {"name":"web2","protocol":"HTTP","port":9090}]},
        "status":{"addresses":[{"value":"gw.example.com"}]}})");
    auto http = gateway_address(gw, std::nullopt, "HTTP");
    ASSERT_TRUE(http);
    EXPECT_EQ(authority(*http), "gw.example.com:8080");
    auto https = gateway_address(gw, std::nullopt, "HTTPS");
    ASSERT_TRUE(https);
    EXPECT_EQ(https->port, 8443);
    auto given = gateway_address(gw, std::uint16_t(81), "HTTP");
    ASSERT_TRUE(given);
    EXPECT_EQ(given->port, 81);
    // No listener of that protocol (or a port out of range): the protocol's default port.
    auto bare = gateway(R"({"metadata":{"name":"gw"},"spec":{"listeners":[{"protocol":"HTTP","port":70000}]},
        "status":{"addresses":[{"value":"1.2.3.4"}]}})");
    EXPECT_EQ(gateway_address(bare, std::nullopt, "HTTP")->port, 80);
    EXPECT_EQ(gateway_address(bare, std::nullopt, "HTTPS")->port, 443);
}

TEST(GatewayAddress, NoUsableAddressIsServiceUnavailableAndSaysWhy) {
    for (const char* text : {R"({"metadata":{"name":"gw"}})", R"({"metadata":{"name":"gw"},"status":{}})",
                             R"({"metadata":{"name":"gw"},"status":{"addresses":[]}})",
                             R"({"metadata":{"name":"gw"},"status":{"addresses":"x"}})"}) {
        auto a = gateway_address(gateway(text), std::nullopt, "HTTP");
        ASSERT_FALSE(a) << text;
        EXPECT_EQ(a.error().code, errc::service_unavailable);
        EXPECT_NE(a.error().message.find("gateway gw has no address"), std::string::npos) << a.error().message;
    }
    auto hostile = gateway_address(
        gateway(R"({"metadata":{"name":"gw"},"status":{"addresses":[{"value":"1.2.3.4/x"},{"value":7}]}})"),
        std::nullopt, "HTTP");
    ASSERT_FALSE(hostile);
    EXPECT_NE(hostile.error().message.find("refused: '1.2.3.4/x'"), std::string::npos) << hostile.error().message;
}

}  // namespace
