// Faults the local cluster injects into streams (exec, watch) and its refusal to run pods when
// bubblewrap cannot isolate them: whole LocalCluster, real loopback sockets, real processes.
#include "http_helper.hpp"

#include <kubesandbox/local_cluster.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/json.hpp>

#include <gtest/gtest.h>

#include <cstdlib>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace json = boost::json;
using asio::ip::tcp;
using kubesandbox::FaultRule;
using kubesandbox::LocalCluster;
using kubesandbox::LocalClusterOptions;
using kubesandbox::test::HttpClient;
using kubesandbox::test::WatchStream;
using namespace std::chrono_literals;

constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);

std::unique_ptr<LocalCluster> start(LocalClusterOptions o) {
    o.tls = false;
    o.agent_sandbox = false;  // no controller requests to take the faults meant for the test
    auto c = LocalCluster::start(o);
    EXPECT_TRUE(c.has_value()) << (c ? "" : c.error().describe());
    return c ? std::move(*c) : nullptr;
}

std::string str(const json::value* v) { return v && v->is_string() ? std::string(v->as_string()) : std::string(); }

json::object pod(const std::string& name, json::array command) {
    return json::object{
        {"apiVersion", "v1"},
        {"kind", "Pod"},
        {"metadata", json::object{{"name", name}}},
        {"spec",
         json::object{{"restartPolicy", "Never"},
                      {"terminationGracePeriodSeconds", 1},
                      {"containers", json::array{json::object{
                                         {"name", "c"}, {"image", "busybox"}, {"command", std::move(command)}}}}}}};
}

// Polls the pod until `pred(pod)` holds (true) or 30 s pass (false).
template <class Pred>
bool wait_pod(HttpClient& h, const std::string& name, Pred pred, json::object* last = nullptr) {
    auto deadline = std::chrono::steady_clock::now() + 30s;
    while (std::chrono::steady_clock::now() < deadline) {
        auto r = h.get("/api/v1/namespaces/default/pods/" + name);
        if (r.status == 200) {
            if (last) *last = r.obj();
            if (pred(r.obj())) return true;
        }
        std::this_thread::sleep_for(100ms);
    }
    return false;
}

std::string phase_of(const json::object& p) {
    auto st = p.if_contains("status");
    return st && st->is_object() ? str(st->as_object().if_contains("phase")) : "";
}

struct ExecOutcome {
    unsigned http_status = 0;
    std::size_t out_bytes = 0;
    std::string status;        // channel 3
    bool clean_close = false;  // a WebSocket close frame arrived
    bool done = false;
};

asio::awaitable<void> exec_client(const LocalCluster& c, std::string target, ExecOutcome& r) {
    websocket::stream<tcp::socket> ws(co_await asio::this_coro::executor);
    tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), c.port());
    auto [cec] = co_await ws.next_layer().async_connect(ep, tuple_awaitable);
    if (cec) {
        r.done = true;
        co_return;
    }
    std::string token = c.token();
    ws.set_option(websocket::stream_base::decorator([token](websocket::request_type& req) {
        req.set(http::field::sec_websocket_protocol, "v5.channel.k8s.io");
        req.set(http::field::authorization, "Bearer " + token);
    }));
    websocket::response_type res;
    auto [hec] = co_await ws.async_handshake(res, "127.0.0.1", target, tuple_awaitable);
    r.http_status = res.result_int();
    if (hec) {
        r.done = true;
        co_return;
    }
    beast::flat_buffer buf;
    for (;;) {
        auto [ec, n] = co_await ws.async_read(buf, tuple_awaitable);
        if (ec) {
            r.clean_close = ec == websocket::error::closed;
            break;
        }
        auto* d = static_cast<const char*>(buf.data().data());
        if (n > 0 && d[0] == 1) r.out_bytes += n - 1;
        if (n > 0 && d[0] == 3) r.status.append(d + 1, n - 1);
        buf.consume(buf.size());
    }
    r.done = true;
}

ExecOutcome exec(const LocalCluster& c, const std::string& pod_name, const std::string& script) {
    std::string enc;
    for (unsigned char ch : script) {
        if (std::isalnum(ch)) {
            enc += static_cast<char>(ch);
        } else {
            char b[4];
            std::snprintf(b, sizeof b, "%%%02X", ch);
            enc += b;
        }
    }
    std::string target = "/api/v1/namespaces/default/pods/" + pod_name + "/exec?command=sh&command=-c&command=" + enc +
                         "&container=c&stdout=true&stderr=true";
    ExecOutcome r;
    asio::io_context io;
    asio::co_spawn(io, exec_client(c, target, r), asio::detached);
    io.run_for(30s);
    EXPECT_TRUE(r.done) << "exec did not finish";
    return r;
}

}  // namespace

// drop_mid_stream on /exec: the connection is cut after the byte budget, mid-output, with no
// exit status and no close frame; the fault is consumed and the next exec streams everything.
TEST(LocalFaults, ExecDroppedMidStream) {
    auto c = start({});
    ASSERT_TRUE(c);
    if (!c->isolation_available()) {
        // CI sets KUBESANDBOX_REQUIRE_ISOLATION: there a missing sandbox is a failure, not a skip.
        if (std::getenv("KUBESANDBOX_REQUIRE_ISOLATION")) FAIL() << "isolation unavailable: " << c->isolation_problem();
        GTEST_SKIP() << "isolation unavailable on this machine: " << c->isolation_problem();
    }
    HttpClient h(*c);
    ASSERT_EQ(h.post("/api/v1/namespaces/default/pods", pod("ex", json::array{"sleep", "3600"})).status, 201u);
    ASSERT_TRUE(wait_pod(h, "ex", [](const json::object& p) { return phase_of(p) == "Running"; }));
    // Output in small, spaced writes: frames stay far below the budget even on a slow machine
    // (one large first frame would be cut before any of it arrived).
    // 1000 bytes every 50 ms: the budget holds 20 writes, so only a reader stalled for a second
    // would see the first frame cut whole.
    const std::string script = "i=0; while [ $i -lt 60 ]; do head -c 1000 /dev/zero; sleep 0.05; i=$((i+1)); done";

    FaultRule cut;
    cut.path_contains = "/exec";
    cut.action = FaultRule::Action::drop_mid_stream;
    cut.drop_after_bytes = 20000;
    c->add_fault(cut);
    auto dropped = exec(*c, "ex", script);
    EXPECT_EQ(dropped.http_status, 101u);
    EXPECT_GT(dropped.out_bytes, 0u);
    EXPECT_LT(dropped.out_bytes, 20000u);
    EXPECT_TRUE(dropped.status.empty()) << dropped.status;
    EXPECT_FALSE(dropped.clean_close);

    auto whole = exec(*c, "ex", script);
    EXPECT_EQ(whole.out_bytes, 60000u);
    EXPECT_NE(whole.status.find("Success"), std::string::npos) << whole.status;
    EXPECT_TRUE(whole.clean_close);
}

// drop_mid_stream on a watch: the chunked stream stops after the budget without its final
// chunk, long before timeoutSeconds; without the fault the same watch delivers every event.
TEST(LocalFaults, WatchDroppedMidStream) {
    auto c = start({});
    ASSERT_TRUE(c);
    HttpClient h(*c);
    for (int i = 0; i < 6; ++i) {
        json::object cm{{"metadata", json::object{{"name", "cm-" + std::to_string(i)}}},
                        {"data", json::object{{"k", std::string(200, 'x')}}}};
        ASSERT_EQ(h.post("/api/v1/namespaces/default/configmaps", cm).status, 201u);
    }
    const std::string target = "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=20";
    auto count_events = [&](WatchStream& w) {
        int n = 0;
        while (w.next(3000)) ++n;
        return n;
    };
    {
        WatchStream whole(*c, target);
        ASSERT_EQ(whole.status(), 200u);
        int n = 0;
        while (n < 6 && whole.next(3000)) ++n;
        EXPECT_EQ(n, 6);
        EXPECT_FALSE(whole.cut());
    }
    FaultRule cut;
    cut.path_contains = "watch=true";
    cut.action = FaultRule::Action::drop_mid_stream;
    cut.drop_after_bytes = 900;
    c->add_fault(cut);
    auto begun = std::chrono::steady_clock::now();
    WatchStream dropped(*c, target);
    ASSERT_EQ(dropped.status(), 200u);
    int n = count_events(dropped);
    EXPECT_LT(n, 6);
    EXPECT_TRUE(dropped.ended());
    EXPECT_TRUE(dropped.cut());
    EXPECT_LT(std::chrono::steady_clock::now() - begun, 10s);
}

// Without working bubblewrap namespaces the cluster says why and refuses pods with a clear
// status, unless allow_no_isolation is set (then the same pod runs, unisolated).
TEST(LocalFaults, PodsRefusedWithoutIsolation) {
    LocalClusterOptions o;
    o.bwrap_program = "/bin/false";
    auto c = start(o);
    ASSERT_TRUE(c);
    EXPECT_FALSE(c->isolation_available());
    std::string why = c->isolation_problem();
    EXPECT_NE(why.find("bubblewrap cannot create the pod namespaces"), std::string::npos) << why;
    HttpClient h(*c);
    ASSERT_EQ(h.post("/api/v1/namespaces/default/pods", pod("refused", json::array{"sleep", "3600"})).status, 201u);
    json::object last;
    ASSERT_TRUE(wait_pod(
        h, "refused", [](const json::object& p) { return phase_of(p) == "Failed"; }, &last))
        << json::serialize(last);
    const auto& st = last.at("status").as_object();
    EXPECT_EQ(str(st.if_contains("reason")), "IsolationUnavailable");
    EXPECT_EQ(str(st.if_contains("message")), why);
    const auto& cs = st.at("containerStatuses").as_array().at(0).as_object();
    EXPECT_EQ(str(cs.at("state").as_object().at("waiting").as_object().if_contains("reason")), "RunContainerError");
    // Exec into it fails like exec into any pod whose container does not run.
    auto ex = exec(*c, "refused", "true");
    if (ex.http_status == 101) {
        EXPECT_NE(ex.status.find("container not found"), std::string::npos) << ex.status;
    }
    EXPECT_EQ(ex.status.find("\"Success\""), std::string::npos) << ex.status;
    c->stop();

    o.allow_no_isolation = true;
    auto unsafe = start(o);
    ASSERT_TRUE(unsafe);
    EXPECT_FALSE(unsafe->isolation_available());
    HttpClient hu(*unsafe);
    ASSERT_EQ(hu.post("/api/v1/namespaces/default/pods", pod("runs", json::array{"sleep", "3600"})).status, 201u);
    EXPECT_TRUE(wait_pod(
        hu, "runs", [](const json::object& p) { return phase_of(p) == "Running"; }, &last))
        << json::serialize(last);
}
