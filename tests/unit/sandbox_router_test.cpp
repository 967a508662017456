// The local sandbox router's header contract and the sandbox runtime's request handling, without
// sockets (shared/spec/agent-sandbox.md §3.1 and §4).
#include "local/router_core.hpp"
#include "local/runtime/multipart_reader.hpp"
#include "local/runtime/runtime_core.hpp"

#include <gtest/gtest.h>

using namespace std::chrono_literals;
namespace rt = kubesandbox::runtime;
using kubesandbox::local::route_sandbox_request;
using kubesandbox::local::RouterRequestHeaders;

namespace {

std::string refusal(const RouterRequestHeaders& h, std::string_view token = "") {
    auto d = route_sandbox_request(h, token, 180s);
    return d.refusal ? std::to_string(d.refusal->status) + " " + d.refusal->detail : "ok";
}

}  // namespace

TEST(SandboxRouterRules, RefusesBadHeadersInTheReferenceOrder) {
    RouterRequestHeaders h;
    EXPECT_EQ(refusal(h), "400 X-Sandbox-ID header is required.");
    h.sandbox_id = "Bad_Name";
    EXPECT_EQ(refusal(h), "400 Invalid sandbox ID format.");
    h.sandbox_id = std::string(64, 'a');
    EXPECT_EQ(refusal(h), "400 Invalid sandbox ID format.");
    h.sandbox_id = "sb-1";
    h.namespace_name = "-ns";
    EXPECT_EQ(refusal(h), "400 Invalid namespace format.");
    h.namespace_name = "team-a";
    for (std::string_view port : {"0", "65536", "80x", "", "-1"}) {
        h.port = port;
        EXPECT_EQ(refusal(h), "400 Invalid port format.") << port;
    }
    h.port = "8080";
    h.pod_ip = "not-an-ip";
    EXPECT_EQ(refusal(h), "400 Invalid target IP address format.");
    for (std::string_view ip : {"127.0.0.1", "0.0.0.0", "169.254.1.1", "224.0.0.1", "::1", "fe80::1"}) {
        h.pod_ip = ip;
        EXPECT_EQ(refusal(h), "400 Invalid target IP address.") << ip;
    }
    h.pod_ip = "10.8.1.23";
    auto d = route_sandbox_request(h, "", 180s);
    ASSERT_TRUE(d.target);
    EXPECT_EQ(d.target->sandbox_id, "sb-1");
    EXPECT_EQ(d.target->namespace_name, "team-a");
    EXPECT_EQ(d.target->port, 8080);
    EXPECT_EQ(d.target->timeout, 180s);
}

TEST(SandboxRouterRules, DefaultsAndTimeoutOnlyLowersTheProxyTimeout) {
    RouterRequestHeaders h;
    h.sandbox_id = "sb";
    auto d = route_sandbox_request(h, "", 180s);
    ASSERT_TRUE(d.target);
    EXPECT_EQ(d.target->namespace_name, "default");
    EXPECT_EQ(d.target->port, 8888);
    h.timeout = "2.5";
    EXPECT_EQ(route_sandbox_request(h, "", 180s).target->timeout, 2500ms);
    h.timeout = "1000";
    EXPECT_EQ(route_sandbox_request(h, "", 180s).target->timeout, 180s);
    for (std::string_view bad : {"-1", "0", "nan", "inf", "soon"}) {
        h.timeout = bad;
        EXPECT_EQ(route_sandbox_request(h, "", 180s).target->timeout, 180s) << bad;
    }
}

TEST(SandboxRouterRules, BearerTokenChecked) {
    RouterRequestHeaders h;
    h.sandbox_id = "sb";
    EXPECT_EQ(refusal(h, "secret"), "401 Missing or invalid Authorization header.");
    h.authorization = "Basic c2VjcmV0";
    EXPECT_EQ(refusal(h, "secret"), "401 Missing or invalid Authorization header.");
    h.authorization = "Bearer secreT";
    EXPECT_EQ(refusal(h, "secret"), "401 Invalid token.");
    h.authorization = "Bearer secretsecret";
    EXPECT_EQ(refusal(h, "secret"), "401 Invalid token.");
    h.authorization = "bearer secret";
    EXPECT_EQ(refusal(h, "secret"), "ok");
    h.authorization.reset();
    EXPECT_EQ(refusal(h), "ok");  // no token configured
}

TEST(SandboxRouterRules, HopByHopAndRoutingHeadersStayBehind) {
    using kubesandbox::local::drop_request_header;
    for (std::string_view name :
         {"Host", "authorization", "X-Sandbox-ID", "x-sandbox-timeout", "Connection", "Keep-Alive",
          "Proxy-Authorization", "TE", "Trailers", "Transfer-Encoding", "Upgrade"})
        EXPECT_TRUE(drop_request_header(name, "")) << name;
    EXPECT_TRUE(drop_request_header("X-Drop-Me", "keep-alive, x-drop-me"));
    EXPECT_FALSE(drop_request_header("X-Drop-Me", "keep-alive"));
    EXPECT_FALSE(drop_request_header("Content-Type", "close"));
    EXPECT_FALSE(drop_request_header("Content-Length", ""));
}

TEST(SandboxRuntimeCore, SplitsLikePosixShlex) {
    auto words = [](std::string_view s) { return rt::shlex_split(s).words; };
    using V = std::vector<std::string>;
    EXPECT_EQ(words("echo a | wc -c"), (V{"echo", "a", "|", "wc", "-c"}));
    EXPECT_EQ(words("sh -c 'echo \"$HOME\"; exit 3'"), (V{"sh", "-c", "echo \"$HOME\"; exit 3"}));
    EXPECT_EQ(words(R"(a "b\"c\\d\$e" f\ g '' "")"), (V{"a", "b\"c\\d\\$e", "f g", "", ""}));
    EXPECT_EQ(words("  \t\n "), V{});
    EXPECT_EQ(words("a'b'\"c\"d"), (V{"abcd"}));
    EXPECT_EQ(rt::shlex_split("echo 'open").error, "No closing quotation");
    EXPECT_EQ(rt::shlex_split("echo \"open").error, "No closing quotation");
    EXPECT_EQ(rt::shlex_split("echo \\").error, "No escaped character");
}

TEST(SandboxRuntimeCore, ErrorTextsMatchPython) {
    EXPECT_EQ(rt::python_list_repr({"sleep", "15"}), "['sleep', '15']");
    EXPECT_EQ(rt::python_list_repr({"it's", "a\"b'", "x\ny\\"}), R"(["it's", 'a"b\'', 'x\ny\\'])");
    EXPECT_EQ(rt::utf8_decode_error("ok \xc3\xa9"), "");
    EXPECT_EQ(rt::utf8_decode_error("ab\xff"),
              "'utf-8' codec can't decode byte 0xff in position 2: invalid start byte");
    EXPECT_EQ(rt::utf8_decode_error("a\xc3"),
              "'utf-8' codec can't decode byte 0xc3 in position 1: unexpected end of data");
    EXPECT_EQ(rt::utf8_decode_error("\xe0\x80\x80"),
              "'utf-8' codec can't decode byte 0xe0 in position 0: invalid continuation byte");
    EXPECT_EQ(rt::utf8_decode_error("\xed\xa0\x80"),  // a surrogate
              "'utf-8' codec can't decode byte 0xed in position 0: invalid continuation byte");
}

TEST(SandboxRuntimeCore, RoutesDecodePathsTwice) {
    using K = rt::Route::Kind;
    EXPECT_EQ(rt::route_request("GET", "/").kind, K::health);
    EXPECT_EQ(rt::route_request("HEAD", "/").kind, K::method_not_allowed);
    EXPECT_EQ(rt::route_request("GET", "/execute").kind, K::method_not_allowed);
    EXPECT_EQ(rt::route_request("POST", "/execute").kind, K::execute);
    EXPECT_EQ(rt::route_request("POST", "/upload").kind, K::upload);
    EXPECT_EQ(rt::route_request("GET", "/nothing").kind, K::not_found);
    auto r = rt::route_request("GET", "/download/a%2Fb%20c.txt?x=1");
    EXPECT_EQ(r.kind, K::download);
    EXPECT_EQ(r.path, "a/b c.txt");
    EXPECT_EQ(rt::route_request("GET", "/exists/50%2525").path, "50%");  // decoded twice
    EXPECT_EQ(rt::route_request("GET", "/list/").path, "");
    EXPECT_EQ(rt::percent_decode("%zz%4"), "%zz%4");
}

TEST(SandboxRuntimeCore, MultipartBodies) {
    EXPECT_EQ(rt::multipart_boundary("multipart/form-data; boundary=abc"), "abc");
    EXPECT_EQ(rt::multipart_boundary("Multipart/Form-Data;boundary=\"a b\""), "a b");
    EXPECT_FALSE(rt::multipart_boundary("application/json"));
    EXPECT_FALSE(rt::multipart_boundary("multipart/form-data"));
    std::string body =
        "--XX\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nhi\r\n"
        "--XX\r\nContent-Disposition: form-data; name=\"file\"; filename=\"d/q\\\"x.bin\"\r\n"
        "Content-Type: application/octet-stream\r\n\r\n" +
        std::string("a\0\r\n--X b", 10) + "\r\n--XX--\r\n";
    auto parts = rt::parse_multipart(body, "XX");
    ASSERT_TRUE(parts);
    ASSERT_EQ(parts->size(), 2u);
    EXPECT_EQ((*parts)[0].name, "note");
    EXPECT_FALSE((*parts)[0].filename);
    EXPECT_EQ((*parts)[1].filename, "d/q\"x.bin");
    EXPECT_EQ((*parts)[1].data, std::string("a\0\r\n--X b", 10));
    EXPECT_FALSE(rt::parse_multipart("--XX\r\nno headers end", "XX"));
    EXPECT_FALSE(rt::parse_multipart("garbage", "XX"));
}

TEST(SandboxRuntimeCore, PathsStayBelowTheBase) {
    EXPECT_EQ(rt::join_below_base("/app", "/etc/passwd"), "/app/etc/passwd");
    EXPECT_EQ(rt::join_below_base("/app", "a/b"), "/app/a/b");
    EXPECT_EQ(rt::join_below_base("/app", ""), "/app");
    EXPECT_TRUE(rt::within_base("/app/x", "/app"));
    EXPECT_FALSE(rt::within_base("/etc", "/app"));
}

TEST(SandboxRuntimeCore, Bodies) {
    EXPECT_EQ(rt::execute_body("a\"\n", "", 3), R"({"stdout":"a\"\n","stderr":"","exit_code":3})");
    bool malformed = false;
    EXPECT_EQ(rt::execute_command(R"({"command":"ls","other":1})", malformed), "ls");
    EXPECT_FALSE(rt::execute_command(R"({"cmd":"ls"})", malformed));
    EXPECT_FALSE(malformed);
    EXPECT_FALSE(rt::execute_command("not json", malformed));
    EXPECT_TRUE(malformed);
    EXPECT_EQ(rt::exists_body("a b", true), R"({"path":"a b","exists":true})");
}
