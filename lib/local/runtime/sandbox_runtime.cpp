// kubesandbox-runtime: the HTTP runtime the local cluster runs inside agent-sandbox pods. It
// speaks python-runtime's API (GET /, POST /execute, POST /upload, GET /download|list|exists/
// {path}) so clients of the real runtime work unchanged, and needs no python3: it is a static
// program the kubelet mounts into the pod. One thread, one io_context; commands run as children
// in sessions of their own (run_command.hpp), and uploads are read as they arrive into a spool
// (upload_spool.hpp).
//
//   kubesandbox-runtime [--host ADDR] [--port PORT]
//   SANDBOX_BASE_DIR (default /app), SANDBOX_EXEC_TIMEOUT_SECONDS (default 300)
#include "local/runtime/multipart_reader.hpp"
#include "local/runtime/run_command.hpp"
#include "local/runtime/runtime_core.hpp"
#include "local/runtime/upload_spool.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/file_posix.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/file_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <csignal>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;
using namespace kubesandbox::runtime;

namespace {

constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);
constexpr std::uint64_t max_request_body = std::uint64_t(1) << 30;  // except uploads, which stream

struct Settings {
    std::string base;  // realpath of the base dir
    double exec_timeout = 300;
};
Settings settings;

// realpath() that also resolves a path whose last components do not exist yet (as Python's
// os.path.realpath does): symlinks followed where they exist, the rest joined lexically.
std::string resolve_path(const std::string& path, int depth = 0) {
    std::string resolved = "/";
    std::size_t pos = 0;
    while (pos < path.size()) {
        auto slash = path.find('/', pos);
        std::string part = path.substr(pos, slash == std::string::npos ? std::string::npos : slash - pos);
        pos = slash == std::string::npos ? path.size() : slash + 1;
        if (part.empty() || part == ".") continue;
        if (part == "..") {
            auto cut = resolved.find_last_of('/');
            resolved = cut == 0 ? "/" : resolved.substr(0, cut);
            continue;
        }
        std::string candidate = resolved == "/" ? "/" + part : resolved + "/" + part;
        struct stat st {};
        if (depth < 40 && ::lstat(candidate.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
            std::vector<char> target(4096);
            auto n = ::readlink(candidate.c_str(), target.data(), target.size() - 1);
            if (n > 0) {
                std::string link(target.data(), static_cast<std::size_t>(n));
                std::string rest = pos < path.size() ? path.substr(pos) : "";
                std::string next = link.front() == '/' ? link : resolved + "/" + link;
                if (!rest.empty()) next += "/" + rest;
                return resolve_path(next, depth + 1);
            }
        }
        resolved = candidate;
    }
    return resolved;
}

bool below_base(const std::string& resolved) {
    const std::string& base = settings.base;
    if (resolved == base) return true;
    return within_base(resolved, base) &&
           (base == "/" || (resolved.size() > base.size() && resolved[base.size()] == '/'));
}

http::response<http::string_body> json_response(unsigned status, std::string body) {
    http::response<http::string_body> res{static_cast<http::status>(status), 11};
    res.set(http::field::content_type, "application/json");
    res.set(http::field::server, "kubesandbox-runtime");
    res.body() = std::move(body);
    return res;
}

http::response<http::string_body> list_directory(const std::string& path) {
    std::string target =
        resolve_path(path.empty() || path == "." ? settings.base : join_below_base(settings.base, path));
    if (!below_base(target)) return json_response(403, message_body("Access denied"));
    struct stat st {};
    if (::stat(target.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
        return json_response(404, message_body("Path is not a directory"));
    }
    DIR* dir = ::opendir(target.c_str());
    if (!dir) return json_response(500, message_body("List files failed: " + os_error_text(errno, target)));
    std::vector<ListEntry> entries;
    while (auto* e = ::readdir(dir)) {
        std::string name = e->d_name;
        if (name == "." || name == "..") continue;
        struct stat es {};
        if (::stat((target + "/" + name).c_str(), &es) != 0) {
            int err = errno;
            ::closedir(dir);
            return json_response(500, message_body("List files failed: " + os_error_text(err, target + "/" + name)));
        }
        entries.push_back(ListEntry{name, static_cast<long long>(es.st_size), S_ISDIR(es.st_mode),
                                    static_cast<double>(es.st_mtim.tv_sec) + es.st_mtim.tv_nsec / 1e9});
    }
    ::closedir(dir);
    return json_response(200, list_body(entries));
}

template <class Response>
asio::awaitable<bool> send(tcp::socket& socket, Response& res, bool keep_alive) {
    res.keep_alive(keep_alive);
    res.prepare_payload();
    auto [ec, n] = co_await http::async_write(socket, res, tuple_awaitable);
    co_return !ec && keep_alive;
}

// The end of POST /upload, once the whole body is in the spool: the same checks and writes as
// python-runtime makes after its form parser has read the body.
http::response<http::string_body> finish_upload(UploadSpool& spool) {
    const std::string& name = *spool.filename();
    std::string target = resolve_path(join_below_base(settings.base, name));
    if (!below_base(target)) return json_response(403, message_body("Access denied"));
    if (spool.spool_error() != 0) {
        return json_response(500, message_body("File upload failed: " + os_error_text(spool.spool_error(), target)));
    }
    // Parents first (mkdir -p), then the file.
    for (std::size_t slash = target.find('/', settings.base.size() + 1); slash != std::string::npos;
         slash = target.find('/', slash + 1)) {
        ::mkdir(target.substr(0, slash).c_str(), 0755);
    }
    int fd = ::open(target.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return json_response(500, message_body("File upload failed: " + os_error_text(errno, target)));
    int error = spool.copy_to(fd);
    ::close(fd);
    if (error != 0) return json_response(500, message_body("File upload failed: " + os_error_text(error, target)));
    return json_response(200, message_body("File '" + name + "' uploaded successfully."));
}

// POST /upload, its body read as it arrives; false when the connection is done.
asio::awaitable<bool> upload(tcp::socket& socket, beast::flat_buffer& buffer,
                             http::request_parser<http::empty_body>& head) {
    bool keep_alive = head.get().keep_alive();
    http::request_parser<http::buffer_body> parser(std::move(head));
    parser.body_limit(boost::none);
    auto boundary = multipart_boundary(parser.get()[http::field::content_type]);
    MultipartReader reader(boundary.value_or(""));
    UploadSpool spool({settings.base, "/tmp"});
    // Read to the end even when the body is not multipart, so the next request starts in place.
    std::vector<char> chunk(256 * 1024);
    while (!parser.is_done()) {
        parser.get().body().data = chunk.data();
        parser.get().body().size = chunk.size();
        auto [ec, n] = co_await http::async_read(socket, buffer, parser, tuple_awaitable);
        if (ec && ec != http::error::need_buffer) co_return false;  // the body broke off: nothing written
        std::size_t got = chunk.size() - parser.get().body().size;
        if (boundary && got > 0) reader.feed(std::string_view(chunk.data(), got), spool);
    }
    if (!boundary || reader.finish() != MultipartReader::State::done || !spool.filename()) {
        auto res = json_response(
            422, R"({"detail":[{"loc":["body","file"],"msg":"field required","type":"value_error.missing"}]})");
        co_return co_await send(socket, res, keep_alive);
    }
    auto res = finish_upload(spool);
    co_return co_await send(socket, res, keep_alive);
}

asio::awaitable<bool> respond(tcp::socket& socket, http::request<http::string_body>& req) {
    bool keep_alive = req.keep_alive();
    Route route = route_request(std::string_view(req.method_string().data(), req.method_string().size()),
                                std::string_view(req.target().data(), req.target().size()));
    switch (route.kind) {
        case Route::Kind::health: {
            auto res = json_response(200, health_body());
            co_return co_await send(socket, res, keep_alive);
        }
        case Route::Kind::execute: {
            bool malformed = false;
            auto command = execute_command(req.body(), malformed);
            if (!command) {
                auto res = json_response(422, malformed ? invalid_json_body() : missing_command_body());
                co_return co_await send(socket, res, keep_alive);
            }
            auto res =
                json_response(200, co_await run_command(std::move(*command), settings.base, settings.exec_timeout));
            co_return co_await send(socket, res, keep_alive);
        }
        case Route::Kind::upload:  // served as it streams, by upload()
            break;
        case Route::Kind::download: {
            std::string target = resolve_path(join_below_base(settings.base, route.path));
            if (!below_base(target)) {
                auto res = json_response(403, message_body("Access denied"));
                co_return co_await send(socket, res, keep_alive);
            }
            struct stat st {};
            beast::error_code ec;
            http::file_body::value_type file;
            if (::stat(target.c_str(), &st) == 0 && S_ISREG(st.st_mode))
                file.open(target.c_str(), beast::file_mode::scan, ec);
            if (!file.is_open()) {
                auto res = ::access(target.c_str(), F_OK) == 0 && S_ISREG(st.st_mode)
                               ? json_response(500, message_body(os_error_text(EACCES, target)))
                               : json_response(404, message_body("File not found"));
                co_return co_await send(socket, res, keep_alive);
            }
            http::response<http::file_body> res{http::status::ok, 11};
            res.set(http::field::content_type, "application/octet-stream");
            res.set(http::field::server, "kubesandbox-runtime");
            auto slash = route.path.find_last_of('/');
            std::string filename = slash == std::string::npos ? route.path : route.path.substr(slash + 1);
            std::string quoted;
            for (char c : filename) {
                if (c == '"' || c == '\\') quoted += '\\';
                if (c != '\r' && c != '\n') quoted += c;
            }
            res.set(http::field::content_disposition, "attachment; filename=\"" + quoted + "\"");
            res.body() = std::move(file);
            co_return co_await send(socket, res, keep_alive);
        }
        case Route::Kind::list: {
            auto res = list_directory(route.path);
            co_return co_await send(socket, res, keep_alive);
        }
        case Route::Kind::exists: {
            std::string target = resolve_path(join_below_base(settings.base, route.path));
            if (!below_base(target)) {
                auto res = json_response(403, message_body("Access denied"));
                co_return co_await send(socket, res, keep_alive);
            }
            struct stat st {};
            auto res = json_response(200, exists_body(route.path, ::stat(target.c_str(), &st) == 0));
            co_return co_await send(socket, res, keep_alive);
        }
        case Route::Kind::method_not_allowed: {
            auto res = json_response(405, detail_body("Method Not Allowed"));
            co_return co_await send(socket, res, keep_alive);
        }
        case Route::Kind::not_found:
            break;
    }
    auto res = json_response(404, detail_body("Not Found"));
    co_return co_await send(socket, res, keep_alive);
}

asio::awaitable<void> serve(tcp::socket socket) {
    beast::flat_buffer buffer;
    for (;;) {
        http::request_parser<http::empty_body> head;
        head.header_limit(64 * 1024);
        head.body_limit(boost::none);  // an upload has none; other bodies are held, so checked below
        auto [ec, n] = co_await http::async_read_header(socket, buffer, head, tuple_awaitable);
        if (ec) co_return;
        auto method = head.get().method_string();
        auto target = head.get().target();
        auto kind = route_request(std::string_view(method.data(), method.size()),
                                  std::string_view(target.data(), target.size()))
                        .kind;
        if (kind == Route::Kind::upload) {
            if (!co_await upload(socket, buffer, head)) break;
            continue;
        }
        bool too_large = head.content_length().value_or(0) > max_request_body;
        http::request_parser<http::string_body> parser(std::move(head));
        parser.body_limit(max_request_body);  // a chunked body, as it arrives
        if (!too_large) std::tie(ec, n) = co_await http::async_read(socket, buffer, parser, tuple_awaitable);
        if (too_large || ec == http::error::body_limit) {
            auto res = json_response(413, detail_body("Request body too large"));
            co_await send(socket, res, false);
            co_return;
        }
        if (ec) co_return;
        auto req = parser.release();
        if (!co_await respond(socket, req)) break;
    }
    beast::error_code ignored;
    socket.shutdown(tcp::socket::shutdown_send, ignored);
}

asio::awaitable<void> accept_loop(tcp::acceptor& acceptor) {
    for (;;) {
        auto [ec, socket] = co_await acceptor.async_accept(tuple_awaitable);
        if (ec) {
            if (ec == asio::error::operation_aborted) co_return;
            continue;  // EMFILE and friends: keep serving the connections we have
        }
        asio::co_spawn(acceptor.get_executor(), serve(std::move(socket)), asio::detached);
    }
}

}  // namespace

int main(int argc, char** argv) {
    std::string host = "0.0.0.0";
    unsigned port = 8888;
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        if ((arg == "--host" || arg == "--port") && i + 1 < argc) {
            std::string value = argv[++i];
            if (arg == "--host") {
                host = value;
            } else {
                char* end = nullptr;
                unsigned long p = std::strtoul(value.c_str(), &end, 10);
                if (!end || *end || p == 0 || p > 65535) {
                    std::cerr << "kubesandbox-runtime: invalid port " << value << "\n";
                    return 2;
                }
                port = static_cast<unsigned>(p);
            }
        } else {
            std::cerr << "usage: kubesandbox-runtime [--host ADDR] [--port PORT]\n";
            return 2;
        }
    }
    const char* base = std::getenv("SANDBOX_BASE_DIR");
    std::string base_dir = base && *base ? base : "/app";
    ::mkdir(base_dir.c_str(), 0755);
    settings.base = resolve_path(base_dir);
    if (const char* t = std::getenv("SANDBOX_EXEC_TIMEOUT_SECONDS"); t && *t) {
        char* end = nullptr;
        double v = std::strtod(t, &end);
        if (end && !*end && v > 0 && std::isfinite(v)) settings.exec_timeout = v;
    }
    ::signal(SIGPIPE, SIG_IGN);

    asio::io_context io(1);
    boost::system::error_code ec;
    auto address = asio::ip::make_address(host, ec);
    if (ec) {
        std::cerr << "kubesandbox-runtime: invalid address " << host << "\n";
        return 2;
    }
    tcp::acceptor acceptor(io);
    tcp::endpoint endpoint(address, static_cast<unsigned short>(port));
    acceptor.open(endpoint.protocol(), ec);
    if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor.bind(endpoint, ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
        std::cerr << "kubesandbox-runtime: cannot listen on " << host << ":" << port << ": " << ec.message() << "\n";
        return 1;
    }
    std::cout << "kubesandbox-runtime listening on " << host << ":" << port << ", base " << settings.base << std::endl;
    asio::co_spawn(io, accept_loop(acceptor), asio::detached);
    io.run();
    return 0;
}
