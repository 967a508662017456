#include "http_helper.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <chrono>

namespace kubesandbox::test {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using asio::ip::tcp;

json::value HttpResult::json() const {
    boost::system::error_code ec;
    auto v = json::parse(body, ec);
    if (ec) return json::value(nullptr);
    return v;
}

const json::object& HttpResult::obj() const {
    if (!parsed_) {
        auto v = json();
        parsed_ = v.is_object() ? v.as_object() : json::object{};
    }
    return *parsed_;
}

namespace {

using boost::system::error_code;

// Either a plain socket or a TLS stream; every operation is asynchronous and bounded by
// io_context::run_for so a broken server cannot hang a test.
struct Conn {
    asio::io_context ioc;
    asio::ssl::context ctx{asio::ssl::context::tls_client};
    std::unique_ptr<tcp::socket> plain;
    std::unique_ptr<asio::ssl::stream<tcp::socket>> tls;
    beast::flat_buffer buffer;

    tcp::socket& socket() { return plain ? *plain : tls->next_layer(); }

    // Runs until `done` or the deadline; on timeout the socket is closed.
    bool run(bool& done, int ms) {
        ioc.restart();
        ioc.run_for(std::chrono::milliseconds(ms));
        if (done) return true;
        error_code ec;
        socket().close(ec);
        ioc.restart();
        ioc.run_for(std::chrono::seconds(2));
        return false;
    }

    bool open(const LocalCluster& c, int ms) {
        tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), c.port());
        error_code ec;
        bool done = false;
        if (c.ca_pem().empty()) {
            plain = std::make_unique<tcp::socket>(ioc);
            plain->async_connect(ep, [&](error_code e) {
                ec = e;
                done = true;
            });
            return run(done, ms) && !ec;
        }
        ctx.add_certificate_authority(asio::buffer(c.ca_pem()), ec);
        ctx.set_verify_mode(asio::ssl::verify_peer);
        tls = std::make_unique<asio::ssl::stream<tcp::socket>>(ioc, ctx);
        tls->set_verify_callback(asio::ssl::host_name_verification("127.0.0.1"));
        tls->next_layer().async_connect(ep, [&](error_code e) {
            ec = e;
            done = true;
        });
        if (!run(done, ms) || ec) return false;
        done = false;
        tls->async_handshake(asio::ssl::stream_base::client, [&](error_code e) {
            ec = e;
            done = true;
        });
        return run(done, ms) && !ec;
    }

    template <class Msg>
    bool write(Msg& m, int ms) {
        error_code ec;
        bool done = false;
        auto h = [&](error_code e, std::size_t) {
            ec = e;
            done = true;
        };
        if (plain) http::async_write(*plain, m, h);
        else http::async_write(*tls, m, h);
        return run(done, ms) && !ec;
    }
    template <class Parser>
    error_code read(Parser& p, int ms) {
        error_code ec;
        bool done = false;
        auto h = [&](error_code e, std::size_t) {
            ec = e;
            done = true;
        };
        if (plain) http::async_read(*plain, buffer, p, h);
        else http::async_read(*tls, buffer, p, h);
        if (!run(done, ms)) return asio::error::timed_out;
        return ec;
    }
    template <class Parser>
    error_code read_header(Parser& p, int ms) {
        error_code ec;
        bool done = false;
        auto h = [&](error_code e, std::size_t) {
            ec = e;
            done = true;
        };
        if (plain) http::async_read_header(*plain, buffer, p, h);
        else http::async_read_header(*tls, buffer, p, h);
        if (!run(done, ms)) return asio::error::timed_out;
        return ec;
    }
};

http::request<http::string_body> make_request(const LocalCluster& c, const std::string& method,
                                              const std::string& target, const std::string& token) {
    http::request<http::string_body> req;
    req.method_string(method);
    req.target(target);
    req.version(11);
    req.set(http::field::host, "127.0.0.1:" + std::to_string(c.port()));
    req.set(http::field::accept, "application/json");
    if (!token.empty()) req.set(http::field::authorization, "Bearer " + token);
    return req;
}

}  // namespace

HttpResult HttpClient::request(const std::string& method, const std::string& target, const std::string& body,
                               const std::string& content_type,
                               const std::vector<std::pair<std::string, std::string>>& headers) {
    HttpResult out;
    Conn conn;
    if (!conn.open(cluster, 10000)) {
        out.transport_error = true;
        return out;
    }
    std::string token = send_token ? (token_override.empty() ? cluster.token() : token_override) : std::string();
    auto req = make_request(cluster, method, target, token);
    if (!body.empty() || method == "POST" || method == "PUT" || method == "PATCH") {
        req.set(http::field::content_type, content_type);
        req.body() = body;
        req.prepare_payload();
    }
    for (auto& [k, v] : headers) req.set(k, v);
    if (!conn.write(req, 10000)) {
        out.transport_error = true;
        return out;
    }
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 * 1024 * 1024);
    auto ec = conn.read(parser, 15000);
    if (ec) {
        out.transport_error = true;
        if (parser.is_header_done()) out.status = parser.get().result_int();
        return out;
    }
    auto& res = parser.get();
    out.status = res.result_int();
    out.content_type = std::string(res[http::field::content_type]);
    out.body = res.body();
    // Repeated fields (e.g. Warning) are joined as HTTP allows: "a, b".
    for (auto& f : res) {
        auto& v = out.headers[std::string(f.name_string())];
        v += (v.empty() ? "" : ", ") + std::string(f.value());
    }
    return out;
}

struct WatchStream::Impl {
    Conn conn;
    http::response_parser<http::buffer_body> parser;
    std::string pending;
    char buf[8192];
    unsigned status = 0;
    bool ended = false;
    bool cut = false;      // ended by a transport error, not by the final chunk
    bool reading = false;  // a read is in flight across next() calls

    void start_read() {
        reading = true;
        parser.get().body().data = buf;
        parser.get().body().size = sizeof buf;
        auto h = [this](error_code ec, std::size_t) {
            reading = false;
            pending.append(buf, sizeof buf - parser.get().body().size);
            if (ec == http::error::need_buffer) ec = {};
            if (ec || parser.is_done()) ended = true;
            if (ec && !parser.is_done()) cut = true;
        };
        if (conn.plain) http::async_read_some(*conn.plain, conn.buffer, parser, h);
        else http::async_read_some(*conn.tls, conn.buffer, parser, h);
    }
};

WatchStream::WatchStream(const LocalCluster& cluster, const std::string& target) : impl_(std::make_unique<Impl>()) {
    if (!impl_->conn.open(cluster, 10000)) {
        impl_->ended = true;
        return;
    }
    auto req = make_request(cluster, "GET", target, cluster.token());
    if (!impl_->conn.write(req, 10000)) {
        impl_->ended = true;
        return;
    }
    impl_->parser.body_limit(boost::none);
    if (impl_->conn.read_header(impl_->parser, 10000)) {
        impl_->ended = true;
        return;
    }
    impl_->status = impl_->parser.get().result_int();
}

WatchStream::~WatchStream() {
    error_code ec;
    if (impl_->conn.plain || impl_->conn.tls) impl_->conn.socket().close(ec);
    impl_->conn.ioc.restart();
    impl_->conn.ioc.run_for(std::chrono::seconds(2));
}

unsigned WatchStream::status() const { return impl_->status; }
bool WatchStream::ended() const { return impl_->ended && impl_->pending.find('\n') == std::string::npos; }
bool WatchStream::cut() const { return impl_->cut; }

std::optional<json::object> WatchStream::next(int timeout_ms) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
        auto nl = impl_->pending.find('\n');
        if (nl != std::string::npos) {
            std::string line = impl_->pending.substr(0, nl);
            impl_->pending.erase(0, nl + 1);
            error_code ec;
            auto v = json::parse(line, ec);
            if (ec || !v.is_object()) return std::nullopt;
            return v.as_object();
        }
        if (impl_->ended) return std::nullopt;
        if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
        if (!impl_->reading) impl_->start_read();
        impl_->conn.ioc.restart();
        impl_->conn.ioc.run_until(deadline);
    }
}

}  // namespace kubesandbox::test
