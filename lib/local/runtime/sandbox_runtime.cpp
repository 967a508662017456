// kubesandbox-runtime: the HTTP runtime the local cluster runs inside agent-sandbox pods. It
// speaks python-runtime's API (GET /, POST /execute, POST /upload, GET /download|list|exists/
// {path}) so clients of the real runtime work unchanged, and needs no python3: it is a static
// program the kubelet mounts into the pod. One thread, one io_context; commands run as children
// in sessions of their own, their pipes read asynchronously.
//
//   kubesandbox-runtime [--host ADDR] [--port PORT]
//   SANDBOX_BASE_DIR (default /app), SANDBOX_EXEC_TIMEOUT_SECONDS (default 300)
#include "local/runtime/runtime_core.hpp"
#include "util/child_process.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/file_posix.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/file_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
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
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <csignal>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;
using namespace asio::experimental::awaitable_operators;
using namespace kubesandbox::runtime;

namespace {

constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);
constexpr std::uint64_t max_request_body = std::uint64_t(1) << 30;
constexpr std::size_t max_output = std::size_t(512) << 20;

struct Settings {
    std::string base;  // realpath of the base dir
    double exec_timeout = 300;
};
Settings settings;

// "[Errno 2] No such file or directory: 'x'", as Python's OSError prints.
std::string os_error_text(int err, const std::string& path) {
    return "[Errno " + std::to_string(err) + "] " + std::strerror(err) + ": " +
           python_list_repr({path}).substr(1, python_list_repr({path}).size() - 2);
}

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

std::string format_seconds(double seconds) {
    char buf[64];
    if (seconds == std::floor(seconds)) {
        std::snprintf(buf, sizeof buf, "%.1f", seconds);
    } else {
        std::snprintf(buf, sizeof buf, "%g", seconds);
    }
    return buf;
}

asio::awaitable<void> read_all(asio::posix::stream_descriptor& pipe, std::string& out, bool& overflow) {
    char chunk[65536];
    for (;;) {
        auto [ec, n] = co_await pipe.async_read_some(asio::buffer(chunk), tuple_awaitable);
        if (n > 0) {
            if (out.size() + n > max_output) {
                overflow = true;
            } else {
                out.append(chunk, n);
            }
        }
        if (ec) co_return;
    }
}

// Closes every descriptor from `first` up, except `keep`.
void close_descriptors_from(int first, int keep) {
    auto close_range = [](unsigned lo, unsigned hi) {
        if (lo > hi) return;
        if (::syscall(SYS_close_range, lo, hi, 0) == 0) return;
        long max = ::sysconf(_SC_OPEN_MAX);
        for (long fd = lo; fd <= std::min<long>(hi, max < 0 ? 65536 : max); ++fd) ::close(static_cast<int>(fd));
    };
    close_range(static_cast<unsigned>(first), static_cast<unsigned>(keep - 1));
    close_range(static_cast<unsigned>(keep + 1), ~0U);
}

asio::awaitable<std::string> run_command(std::string command) {
    auto failed = [](const std::string& why) { return execute_body("", "Failed to execute command: " + why, 1); };
    auto split = shlex_split(command);
    if (!split.error.empty()) co_return failed(split.error);
    if (split.words.empty()) co_return failed("list index out of range");
    std::vector<std::string>& words = split.words;

    int out[2], err[2], report[2];
    if (::pipe2(out, O_CLOEXEC) != 0) co_return failed(std::strerror(errno));
    if (::pipe2(err, O_CLOEXEC) != 0) {
        ::close(out[0]), ::close(out[1]);
        co_return failed(std::strerror(errno));
    }
    if (::pipe2(report, O_CLOEXEC) != 0) {
        ::close(out[0]), ::close(out[1]), ::close(err[0]), ::close(err[1]);
        co_return failed(std::strerror(errno));
    }
    std::vector<char*> argv;
    for (auto& w : words) argv.push_back(w.data());
    argv.push_back(nullptr);
    pid_t pid = ::fork();
    if (pid == 0) {
        ::setsid();
        ::dup2(out[1], 1);
        ::dup2(err[1], 2);
        // Nothing else of the server's reaches the command (its listening socket would keep the
        // port after the server dies), as with python-runtime, whose descriptors close on exec.
        close_descriptors_from(3, report[1]);
        int e = 0;
        if (::chdir(settings.base.c_str()) != 0) {
            e = errno;
        } else {
            ::signal(SIGPIPE, SIG_DFL);
            ::execvp(argv[0], argv.data());
            e = errno;
        }
        [[maybe_unused]] auto w = ::write(report[1], &e, sizeof e);
        ::_exit(127);
    }
    ::close(out[1]), ::close(err[1]), ::close(report[1]);
    if (pid < 0) {
        ::close(out[0]), ::close(err[0]), ::close(report[0]);
        co_return failed(std::strerror(errno));
    }
    auto ex = co_await asio::this_coro::executor;
    asio::posix::stream_descriptor out_pipe(ex, out[0]), err_pipe(ex, err[0]), report_pipe(ex, report[0]);
    int exec_errno = 0;
    auto [rec, rn] =
        co_await asio::async_read(report_pipe, asio::buffer(&exec_errno, sizeof exec_errno), tuple_awaitable);
    int pidfd = kubesandbox::util::open_pidfd(pid);
    std::optional<asio::posix::stream_descriptor> pidfd_stream;
    if (pidfd >= 0) pidfd_stream.emplace(ex, pidfd);
    if (rn == sizeof exec_errno) {
        co_await kubesandbox::util::reap_child(pidfd_stream ? &*pidfd_stream : nullptr, pid);
        co_return failed(os_error_text(exec_errno, words[0]));
    }

    std::string stdout_text, stderr_text;
    bool overflow = false;
    asio::steady_timer timer(ex);
    timer.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(settings.exec_timeout)));
    auto outcome = co_await ((read_all(out_pipe, stdout_text, overflow) && read_all(err_pipe, stderr_text, overflow)) ||
                             timer.async_wait(tuple_awaitable));
    bool timed_out = outcome.index() == 1;
    if (timed_out) {
        ::kill(-pid, SIGKILL);
        ::kill(pid, SIGKILL);
    }
    out_pipe.close();
    err_pipe.close();
    auto status = co_await kubesandbox::util::reap_child(pidfd_stream ? &*pidfd_stream : nullptr, pid);
    if (timed_out) {
        co_return failed("Command '" + python_list_repr(words) + "' timed out after " +
                         format_seconds(settings.exec_timeout) + " seconds");
    }
    if (overflow) co_return failed("output larger than " + std::to_string(max_output) + " bytes");
    for (const std::string* text : {&stdout_text, &stderr_text}) {
        if (auto why = utf8_decode_error(*text); !why.empty()) co_return failed(why);
    }
    int code = 0;
    if (status && *status >= 0) {
        if (WIFEXITED(*status)) code = WEXITSTATUS(*status);
        if (WIFSIGNALED(*status)) code = -WTERMSIG(*status);
    }
    co_return execute_body(stdout_text, stderr_text, code);
}

http::response<http::string_body> upload(const http::request<http::string_body>& req) {
    auto missing_file = [] {
        return json_response(
            422, R"({"detail":[{"loc":["body","file"],"msg":"field required","type":"value_error.missing"}]})");
    };
    auto boundary = multipart_boundary(req[http::field::content_type]);
    if (!boundary) return missing_file();
    auto parts = parse_multipart(req.body(), *boundary);
    if (!parts) return missing_file();
    for (auto& part : *parts) {
        if (part.name != "file" || !part.filename) continue;
        const std::string& name = *part.filename;
        std::string target = resolve_path(join_below_base(settings.base, name));
        if (!below_base(target)) return json_response(403, message_body("Access denied"));
        // Parents first (mkdir -p), then the file.
        for (std::size_t slash = target.find('/', settings.base.size() + 1); slash != std::string::npos;
             slash = target.find('/', slash + 1)) {
            ::mkdir(target.substr(0, slash).c_str(), 0755);
        }
        int fd = ::open(target.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) return json_response(500, message_body("File upload failed: " + os_error_text(errno, target)));
        std::size_t done = 0;
        while (done < part.data.size()) {
            auto n = ::write(fd, part.data.data() + done, part.data.size() - done);
            if (n < 0) {
                if (errno == EINTR) continue;
                int e = errno;
                ::close(fd);
                return json_response(500, message_body("File upload failed: " + os_error_text(e, target)));
            }
            done += static_cast<std::size_t>(n);
        }
        ::close(fd);
        return json_response(200, message_body("File '" + name + "' uploaded successfully."));
    }
    return missing_file();
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
            auto res = json_response(200, co_await run_command(std::move(*command)));
            co_return co_await send(socket, res, keep_alive);
        }
        case Route::Kind::upload: {
            auto res = upload(req);
            co_return co_await send(socket, res, keep_alive);
        }
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
        http::request_parser<http::string_body> parser;
        parser.body_limit(max_request_body);
        parser.header_limit(64 * 1024);
        auto [ec, n] = co_await http::async_read(socket, buffer, parser, tuple_awaitable);
        if (ec == http::error::body_limit) {
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
