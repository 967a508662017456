// Sans-IO helpers of the client: server/proxy URL parsing, NO_PROXY matching, Basic auth.
#include "proto/request.hpp"

#include <gtest/gtest.h>

namespace ks = kubesandbox;
using ks::errc;
using ks::proto::no_proxy_matches;

TEST(ServerUrl, ProxyUserinfoIsStrippedAndDecoded) {
    auto u = ks::proto::parse_server_url("http://user:p%40ss%3Aword@proxy.example.com:3128");
    ASSERT_TRUE(u.has_value()) << u.error().message;
    EXPECT_FALSE(u->tls);
    EXPECT_EQ(u->host, "proxy.example.com");
    EXPECT_EQ(u->port, "3128");
    EXPECT_TRUE(u->has_userinfo);
    EXPECT_EQ(u->username, "user");
    EXPECT_EQ(u->password, "p@ss:word");
}

TEST(ServerUrl, UserOnlyAndNoUserinfo) {
    auto only = ks::proto::parse_server_url("http://alice@10.0.0.1:8080");
    ASSERT_TRUE(only.has_value());
    EXPECT_EQ(only->host, "10.0.0.1");
    EXPECT_EQ(only->username, "alice");
    EXPECT_EQ(only->password, "");
    auto none = ks::proto::parse_server_url("https://[::1]:6443/prefix/");
    ASSERT_TRUE(none.has_value());
    EXPECT_FALSE(none->has_userinfo);
    EXPECT_EQ(none->host, "::1");
    EXPECT_EQ(none->base_path, "/prefix");
}

TEST(ServerUrl, ErrorsNeverRepeatThePassword) {
    auto bad = ks::proto::parse_server_url("socks5://bob:hunter2@proxy:1080");
    ASSERT_FALSE(bad.has_value());
    EXPECT_TRUE(bad.error().is(errc::invalid_config));
    EXPECT_EQ(bad.error().message.find("hunter2"), std::string::npos) << bad.error().message;
    EXPECT_EQ(bad.error().message.find("bob"), std::string::npos) << bad.error().message;
    EXPECT_NE(bad.error().message.find("proxy:1080"), std::string::npos) << bad.error().message;
}

TEST(BasicAuthorization, Rfc7617Example) {
    EXPECT_EQ(ks::proto::basic_authorization("Aladdin", "open sesame"), "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==");
    EXPECT_EQ(ks::proto::basic_authorization("a", ""), "Basic YTo=");
    EXPECT_EQ(ks::proto::basic_authorization("ab", "c"), "Basic YWI6Yw==");
}

TEST(NoProxy, ExactHostAndCase) {
    EXPECT_TRUE(no_proxy_matches("api.internal", "api.internal"));
    EXPECT_TRUE(no_proxy_matches("API.Internal", "api.internal"));
    EXPECT_FALSE(no_proxy_matches("api.internal", "other.internal"));
    EXPECT_FALSE(no_proxy_matches("", "api.internal"));
}

TEST(NoProxy, LeadingDotMatchesSubdomainsAndTheDomain) {
    EXPECT_TRUE(no_proxy_matches(".example.com", "k8s.example.com"));
    EXPECT_TRUE(no_proxy_matches(".example.com", "a.b.example.com"));
    EXPECT_TRUE(no_proxy_matches(".example.com", "example.com"));
    EXPECT_FALSE(no_proxy_matches(".example.com", "badexample.com"));
    EXPECT_TRUE(no_proxy_matches("*.example.com", "k8s.example.com"));
}

TEST(NoProxy, BareDomainMatchesSubdomainsOnLabelBoundaries) {
    EXPECT_TRUE(no_proxy_matches("example.com", "example.com"));
    EXPECT_TRUE(no_proxy_matches("example.com", "k8s.example.com"));
    EXPECT_FALSE(no_proxy_matches("example.com", "notexample.com"));
    EXPECT_FALSE(no_proxy_matches("example.com", "example.com.evil.net"));
}

TEST(NoProxy, ListsWithSpacesAndStar) {
    EXPECT_TRUE(no_proxy_matches(" foo.io , bar.io ", "bar.io"));
    EXPECT_TRUE(no_proxy_matches("foo.io,*", "anything.net"));
    EXPECT_TRUE(no_proxy_matches("*", "10.1.2.3"));
    EXPECT_FALSE(no_proxy_matches("foo.io,,", "bar.io"));
}

TEST(NoProxy, IpsAndCidrs) {
    EXPECT_TRUE(no_proxy_matches("10.0.0.1", "10.0.0.1"));
    EXPECT_FALSE(no_proxy_matches("10.0.0.1", "10.0.0.2"));
    EXPECT_TRUE(no_proxy_matches("10.0.0.0/8", "10.200.3.4"));
    EXPECT_TRUE(no_proxy_matches("10.0.0.0/8", "10.0.0.0"));
    EXPECT_TRUE(no_proxy_matches("192.168.1.0/24", "192.168.1.255"));
    EXPECT_FALSE(no_proxy_matches("192.168.1.0/24", "192.168.2.1"));
    EXPECT_TRUE(no_proxy_matches("172.16.0.0/12", "172.31.255.1"));
    EXPECT_FALSE(no_proxy_matches("172.16.0.0/12", "172.32.0.1"));
    EXPECT_TRUE(no_proxy_matches("fd00::/8", "fd12::1"));
    EXPECT_FALSE(no_proxy_matches("fd00::/8", "fe80::1"));
    EXPECT_TRUE(no_proxy_matches("2001:db8::1", "2001:db8::1"));
    EXPECT_FALSE(no_proxy_matches("10.0.0.0/8", "ten.example.com"));
    EXPECT_FALSE(no_proxy_matches("10.0.0.0/33", "10.0.0.1"));
}

TEST(NoProxy, PortsNarrowAnEntry) {
    EXPECT_TRUE(no_proxy_matches("api.internal:6443", "api.internal", "6443"));
    EXPECT_FALSE(no_proxy_matches("api.internal:6443", "api.internal", "443"));
    EXPECT_TRUE(no_proxy_matches("api.internal:6443", "api.internal"));  // port unknown: host decides
    EXPECT_TRUE(no_proxy_matches("10.0.0.1:443", "10.0.0.1", "443"));
    EXPECT_FALSE(no_proxy_matches("10.0.0.1:443", "10.0.0.1", "6443"));
    EXPECT_TRUE(no_proxy_matches("[2001:db8::1]:443", "2001:db8::1", "443"));
    EXPECT_FALSE(no_proxy_matches("[2001:db8::1]:443", "2001:db8::1", "80"));
    EXPECT_TRUE(no_proxy_matches(".example.com:443", "k8s.example.com", "443"));
}

TEST(NoProxy, LoopbackAlwaysBypasses) {
    EXPECT_TRUE(no_proxy_matches("", "127.0.0.1"));
    EXPECT_TRUE(no_proxy_matches("", "127.8.9.10"));
    EXPECT_TRUE(no_proxy_matches("", "::1"));
    EXPECT_TRUE(no_proxy_matches("", "localhost"));
    EXPECT_TRUE(ks::proto::is_loopback_host("127.0.0.1"));
    EXPECT_FALSE(ks::proto::is_loopback_host("10.0.0.1"));
    EXPECT_FALSE(ks::proto::is_loopback_host("localhost.example.com"));
}
