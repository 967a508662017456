// The local API server's connection loop: reading requests, injected faults, writing
// responses, watch streams, and handing pod streams to the kubelet. The requests themselves
// are handled in api_handler.cpp.
#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <charconv>
#include <set>
#include <sstream>
#include <variant>
#include "local/api_server_impl.hpp"
#include "local/kubelet.hpp"
#include "local/store.hpp"
#include "net/forwarding_stream.hpp"
#include "proto/label_selector.hpp"
#include "proto/status.hpp"
#include "util/json_access.hpp"

namespace kubesandbox::local {

// ---------------------------------------------------------------------------------------------
// HTTP

namespace {

struct Conn {
    net::AnyStream stream;
    beast::flat_buffer buffer;
};

// FaultRule::Action::drop_mid_stream: a stream that closes its inner stream once `budget` bytes
// were written. Works below every protocol (HTTP, chunked watch, WebSocket, SPDY), so the
// kubelet's streams honour it without knowing. State is shared with pending handlers, which may
// complete after the wrapper is gone.
struct CutState {
    net::AnyStream inner;
    std::size_t left = 0;
};

class CutAfterBytes final : public net::ForwardingStream<CutState> {
public:
    CutAfterBytes(net::AnyStream inner, std::size_t budget) : ForwardingStream(std::make_shared<CutState>()) {
        s_->inner = std::move(inner);
        s_->left = budget;
    }

    // Every write goes out as it is made: the cut must not drop held records with the connection.
    void hold_writes(bool) noexcept override {}

    void write_some(const net::ConstBufferList& b, net::IoHandler h) override {
        if (s_->left == 0) {
            s_->inner.close();
            asio::post(s_->inner.get_executor(), [h = std::move(h)]() mutable {
                std::move(h)(error_code(asio::error::connection_reset), std::size_t{0});
            });
            return;
        }
        s_->inner.async_write_some(b.prefix(s_->left),
                                   [s = s_, h = std::move(h)](error_code ec, std::size_t written) mutable {
                                       s->left -= std::min(written, s->left);
                                       if (s->left == 0) s->inner.close();  // what was written still arrives
                                       std::move(h)(ec, written);
                                   });
    }
};

std::string serialize_head(unsigned status, const std::vector<std::pair<std::string, std::string>>& headers) {
    std::string head = "HTTP/1.1 " + std::to_string(status) + " " +
                       std::string(http::obsolete_reason(static_cast<http::status>(status))) + "\r\n";
    for (auto& [k, v] : headers) head += k + ": " + v + "\r\n";
    head += "\r\n";
    return head;
}

asio::awaitable<bool> write_raw(net::AnyStream& s, std::string data) {
    auto [ec, n] = co_await asio::async_write(s, asio::buffer(data), asio::as_tuple(asio::use_awaitable));
    (void)n;
    co_return !ec;
}

std::vector<std::pair<std::string, std::string>> base_headers(const Response& r, bool keep_alive) {
    std::vector<std::pair<std::string, std::string>> h{{"Content-Type", r.content_type},
                                                       {"Cache-Control", "no-cache, private"},
                                                       {"Content-Length", std::to_string(r.body.size())}};
    if (!keep_alive) h.emplace_back("Connection", "close");
    for (auto& x : r.headers) h.push_back(x);
    return h;
}

}  // namespace

// Watch stream: chunked JSON lines until timeout, expiry or a write error.
// Membership of a watcher in the server's fan-out list for the lifetime of its stream.
struct WatcherRegistration {
    ApiServer::Impl& impl;
    std::shared_ptr<Watcher> w;
    WatcherRegistration(ApiServer::Impl& i, std::shared_ptr<Watcher> watcher) : impl(i), w(std::move(watcher)) {
        impl.watchers.push_back(w);
    }
    WatcherRegistration(const WatcherRegistration&) = delete;
    WatcherRegistration& operator=(const WatcherRegistration&) = delete;
    ~WatcherRegistration() { impl.watchers.remove(w); }
};

static asio::awaitable<bool> serve_watch(ApiServer::Impl& impl, Conn& conn, const Request& req, const Route& r) {
    const ResourceType& t = *r.type;
    auto sel_or = impl.selectors(req, t);
    auto write_response = [&](const Response& resp) -> asio::awaitable<bool> {
        std::string data = serialize_head(resp.status, base_headers(resp, true)) + resp.body;
        co_return co_await write_raw(conn.stream, std::move(data));
    };
    if (auto* resp = std::get_if<Response>(&sel_or)) {
        bool ok = co_await write_response(*resp);
        co_return ok;
    }
    auto w = std::make_shared<Watcher>(impl.executor);
    w->type = &t;
    w->version = r.version;
    w->ns = r.ns;
    w->labels = std::get<ApiServer::Impl::Selectors>(sel_or).labels;
    w->fields = std::get<ApiServer::Impl::Selectors>(sel_or).fields;
    w->table = wants_table(req.msg);
    if (auto io = req.query.find("includeObject"); io != req.query.end()) w->include_object = io->second == "Object";
    std::string rv;
    if (auto it = req.query.find("resourceVersion"); it != req.query.end()) rv = it->second;
    bool bookmarks = false;
    if (auto it = req.query.find("allowWatchBookmarks"); it != req.query.end()) bookmarks = parse_bool(it->second);
    std::optional<std::int64_t> timeout = int_param(req.query, "timeoutSeconds");
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout ? *timeout : 1800);

    std::optional<std::string> error_line;
    if (rv.empty() || rv == "0") {
        for (const auto& [key, obj] : impl.store.objects(t.id()))
            if (impl.in_scope(*w, *obj)) w->queue.push_back(impl.event_line(*w, "ADDED", *obj));
    } else {
        std::uint64_t n = 0;
        auto [ptr, perr] = std::from_chars(rv.data(), rv.data() + rv.size(), n);
        if (perr != std::errc() || ptr != rv.data() + rv.size()) {
            Response bad = bad_request("invalid resource version: " + rv);
            bool ok = co_await write_response(bad);
            co_return ok;
        }
        auto events = impl.store.events_since(n);
        if (!events) {
            auto st = proto::make_status(
                410, "Expired",
                "too old resource version: " + rv + " (" + std::to_string(impl.store.resource_version()) + ")");
            error_line = json::serialize(json::object{{"type", "ERROR"}, {"object", st}}) + "\n";
        } else {
            for (auto* ev : *events) impl.feed(*w, *ev);
        }
    }
    // Register before the first suspension: an event recorded while the head is being written
    // must land in this watcher's queue, not fall between the replay and the registration.
    std::optional<WatcherRegistration> registration;
    if (!error_line) registration.emplace(impl, w);
    std::string head = serialize_head(200, {{"Content-Type", "application/json"},
                                            {"Cache-Control", "no-cache, private"},
                                            {"Transfer-Encoding", "chunked"}});
    if (!co_await write_raw(conn.stream, std::move(head))) co_return false;
    auto chunk = [](const std::string& data) {
        std::ostringstream os;
        os << std::hex << data.size() << "\r\n" << data << "\r\n";
        return os.str();
    };
    if (error_line) {
        bool ok = co_await write_raw(conn.stream, chunk(*error_line) + "0\r\n\r\n");
        co_return ok;
    }
    auto bookmark = [&] {
        json::object o{{"kind", t.kind},
                       {"apiVersion", t.api_version(r.version)},
                       {"metadata", json::object{{"resourceVersion", std::to_string(impl.store.resource_version())},
                                                 {"creationTimestamp", nullptr}}}};
        return json::serialize(json::object{{"type", "BOOKMARK"}, {"object", o}}) + "\n";
    };
    auto next_bookmark = std::chrono::steady_clock::now() + 5s;
    for (;;) {
        while (!w->queue.empty()) {
            std::string data;
            while (!w->queue.empty() && data.size() < 65536) {
                data += chunk(w->queue.front());
                w->queue.pop_front();
            }
            if (!co_await write_raw(conn.stream, std::move(data))) co_return false;
        }
        if (w->expired || impl.stopping) {
            auto st = proto::make_status(410, "Expired", "watch expired: the server closed this watch");
            std::string line = json::serialize(json::object{{"type", "ERROR"}, {"object", st}}) + "\n";
            co_await write_raw(conn.stream, chunk(line) + "0\r\n\r\n");
            co_return false;
        }
        auto now = std::chrono::steady_clock::now();
        if (now >= deadline) {
            std::string tail;
            if (bookmarks) tail = chunk(bookmark());
            bool ok = co_await write_raw(conn.stream, tail + "0\r\n\r\n");
            co_return ok;
        }
        if (bookmarks && now >= next_bookmark) {
            next_bookmark = now + 5s;
            if (!co_await write_raw(conn.stream, chunk(bookmark()))) co_return false;
            continue;
        }
        w->signal.expires_at(bookmarks ? std::min(deadline, next_bookmark) : deadline);
        auto [ec] = co_await w->signal.async_wait(asio::as_tuple(asio::use_awaitable));
        (void)ec;
    }
}

// Serves one request: faults first, then what handle_request made of it. Returns false when
// the connection must close (or was handed over).
static asio::awaitable<bool> handle(ApiServer::Impl& impl, Conn& conn, Request& req) {
    bool keep_alive = req.msg.keep_alive();
    auto send = [&](Response resp) -> asio::awaitable<bool> {
        std::string data = serialize_head(resp.status, base_headers(resp, keep_alive)) + resp.body;
        bool ok = co_await write_raw(conn.stream, std::move(data));
        co_return ok&& keep_alive;
    };
    std::string target(req.msg.target());
    // Fault injection first: it models an overloaded or flaky server.
    auto fault = impl.faults.take(req.method, target);
    if (fault && fault->action == FaultRule::Action::latency) {
        asio::steady_timer timer(impl.executor, fault->latency);
        co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
        fault.reset();
    }
    if (fault && fault->action == FaultRule::Action::drop_before_response) {
        conn.stream.close();
        co_return false;
    }
    if (fault && fault->action == FaultRule::Action::drop_mid_stream) {
        // The connection's address stays the same: the server's open-connection set still finds it.
        conn.stream = net::AnyStream(std::make_unique<CutAfterBytes>(std::move(conn.stream), fault->drop_after_bytes));
        fault.reset();
    }
    if (fault && fault->action == FaultRule::Action::status) {
        Response resp;
        resp.status = fault->status;
        if (fault->status == 429) {
            resp.content_type = "text/plain; charset=utf-8";
            resp.body = "Too many requests, please try again later.\n";
        } else {
            proto::StatusDetails d;
            if (fault->retry_after_seconds) d.retry_after_seconds = *fault->retry_after_seconds;
            std::string reason = status_reason(fault->status);
            std::string msg = fault->status == 500 ? "Internal error occurred: injected fault" : "injected fault";
            resp.body = json::serialize(proto::make_status(fault->status, reason, msg, d));
        }
        if (fault->retry_after_seconds)
            resp.headers.emplace_back("Retry-After", std::to_string(*fault->retry_after_seconds));
        bool ok = co_await send(std::move(resp));
        co_return ok;
    }

    Outcome out = handle_request(impl, req);
    if (auto* watch = std::get_if<WatchStream>(&out)) {
        bool ok = co_await serve_watch(impl, conn, req, watch->route);
        co_return ok&& keep_alive;
    }
    if (auto* stream = std::get_if<PodStream>(&out)) {
        const std::string& sub = stream->route.sub;
        StreamRequest sr{std::move(conn.stream), std::move(conn.buffer), std::move(req.msg), *stream->pod};
        if (sub == "exec") co_await impl.kubelet->serve_exec(std::move(sr));
        else if (sub == "portforward") co_await impl.kubelet->serve_portforward(std::move(sr));
        else co_await impl.kubelet->serve_log(std::move(sr));
        co_return false;
    }
    Response resp = std::get<Response>(std::move(out));
    if (fault && fault->action == FaultRule::Action::drop_mid_body) {
        std::string full = resp.body;
        std::string data =
            serialize_head(resp.status, base_headers(resp, keep_alive)) + full.substr(0, full.size() / 2);
        co_await write_raw(conn.stream, std::move(data));
        conn.stream.close();
        co_return false;
    }
    bool ok = co_await send(std::move(resp));
    co_return ok;
}

asio::awaitable<void> ApiServer::serve(net::AnyStream stream) {
    Conn conn{std::move(stream), beast::flat_buffer()};
    impl_->connections->insert(&conn.stream);
    struct Untrack {
        std::shared_ptr<std::set<net::AnyStream*>> set;
        net::AnyStream* s;
        ~Untrack() { set->erase(s); }
    } untrack{impl_->connections, &conn.stream};
    for (;;) {
        if (impl_->stopping) break;
        http::request_parser<http::string_body> parser;
        parser.body_limit(body_limit);
        parser.header_limit(64 * 1024);
        conn.stream.expires_after(120s);
        auto [ec, n] = co_await http::async_read(conn.stream, conn.buffer, parser, asio::as_tuple(asio::use_awaitable));
        (void)n;
        if (ec == http::error::body_limit) {
            Response r = status_response(413, "RequestEntityTooLarge", "Request entity too large: limit is 3145728");
            co_await write_raw(conn.stream, serialize_head(413, base_headers(r, false)) + r.body);
            // Lingering close: discard the rest of the upload for a moment, so the client's
            // pending write does not turn into a reset that hides the 413 from it.
            conn.stream.expires_after(2s);
            std::vector<char> sink(64 * 1024);
            for (std::size_t drained = 0; drained < 64 * 1024 * 1024;) {
                auto [dec, dn] =
                    co_await conn.stream.async_read_some(asio::buffer(sink), asio::as_tuple(asio::use_awaitable));
                if (dec) break;
                drained += dn;
            }
            break;
        }
        if (ec) break;
        conn.stream.expires_never();
        Request req;
        req.msg = parser.release();
        req.method = std::string(req.msg.method_string());
        bool keep = co_await handle(*impl_, conn, req);
        if (!keep) break;
    }
    if (conn.stream) {
        conn.stream.expires_after(2s);
        co_await conn.stream.async_shutdown(asio::as_tuple(asio::use_awaitable));
        conn.stream.close();
    }
}

}  // namespace kubesandbox::local
