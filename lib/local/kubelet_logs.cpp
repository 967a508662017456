// The local kubelet's container logs: the log file served with tailLines, limitBytes,
// sinceSeconds, timestamps and follow, as the kubelet's log endpoint answers them.
#include "local/kubelet.hpp"

#include "local/kubelet_core.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/url/parse.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace kubesandbox::local {

namespace kubelet_detail {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using boost::system::error_code;
using namespace std::chrono_literals;
using namespace asio::experimental::awaitable_operators;

// The last `lines` lines of the file's first `size` bytes: the offset they start at.
std::uint64_t tail_offset(int fd, std::uint64_t size, std::int64_t lines) {
    if (lines < 0) return 0;
    if (lines == 0) return size;
    std::uint64_t pos = size;
    std::int64_t seen = 0;
    char buf[8192];
    bool first = true;
    while (pos > 0) {
        std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(sizeof buf, pos));
        pos -= n;
        if (::pread(fd, buf, n, static_cast<off_t>(pos)) != static_cast<ssize_t>(n)) return 0;
        for (std::size_t i = n; i-- > 0;) {
            if (buf[i] == '\n') {
                // A trailing newline ends the last line rather than starting an empty one.
                if (first && pos + i == size - 1) {
                    first = false;
                    continue;
                }
                if (++seen == lines) return pos + i + 1;
            }
            first = false;
        }
    }
    return 0;
}

}  // namespace
}  // namespace kubelet_detail

using namespace kubelet_detail;

asio::awaitable<void> Kubelet::serve_log(StreamRequest request) {
    auto core = impl_->core;
    auto& stream = request.stream;
    unsigned version = request.request.version();
    std::string pod_name = str(obj(request.pod, "metadata"), "name");
    std::map<std::string, std::string> params;
    bool has_container = false;
    if (auto url = boost::urls::parse_origin_form(request.request.target())) {
        for (auto p : url->params()) {
            params[p.key] = p.value;
            if (p.key == "container") has_container = true;
        }
    }
    std::string container = params["container"];
    if (auto bad = pick_container(request.pod, has_container, container)) {
        co_await write_status(stream, version, 400, "BadRequest", *bad);
        co_return;
    }
    auto flag = [&](const char* k) {
        auto it = params.find(k);
        return it != params.end() && query_bool(std::string_view(it->second));
    };
    std::string uid = str(obj(request.pod, "metadata"), "uid");
    std::shared_ptr<PodRecord> pod;
    if (auto it = core->pods.find(uid); it != core->pods.end() && !it->second->removed) pod = it->second;
    if (flag("previous")) {
        co_await write_status(
            stream, version, 400, "BadRequest",
            "previous terminated container \"" + container + "\" in pod \"" + pod_name + "\" not found");
        co_return;
    }
    fs::path file = core->pods_dir() / uid / "container.log";
    Fd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
    if (!pod || container != pod->container_name || fd.fd < 0) {
        std::string reason = "ContainerCreating";
        if (pod && container == pod->container_name) {
            if (auto* w = pod->state.if_contains("waiting"); w && w->is_object())
                reason = str(w->get_object(), "reason");
        }
        std::string msg = "container \"" + container + "\" in pod \"" + pod_name + "\" is waiting to start: " + reason;
        if (reason == "ErrImagePull" || reason == "ImagePullBackOff") {
            msg = "container \"" + container + "\" in pod \"" + pod_name +
                  "\" is waiting to start: trying and failing to pull image";
        }
        co_await write_status(stream, version, 400, "BadRequest", msg);
        co_return;
    }
    std::int64_t tail = -1;
    std::int64_t limit = -1;
    auto parse_int = [](const std::string& text, std::int64_t& out) {
        if (text.empty()) return true;
        char* end = nullptr;
        errno = 0;
        long long v = std::strtoll(text.c_str(), &end, 10);
        if (errno != 0 || *end != '\0') return false;
        out = v;
        return true;
    };
    if (!parse_int(params["tailLines"], tail) || !parse_int(params["limitBytes"], limit)) {
        co_await write_status(stream, version, 400, "BadRequest", "invalid tailLines or limitBytes");
        co_return;
    }
    bool follow = flag("follow");
    struct stat st {};
    ::fstat(fd.fd, &st);
    std::uint64_t offset = tail_offset(fd.fd, static_cast<std::uint64_t>(st.st_size), tail);
    std::uint64_t sent = 0;
    auto budget = [&]() -> std::uint64_t {
        return limit < 0 ? UINT64_MAX : static_cast<std::uint64_t>(limit) - std::min<std::uint64_t>(sent, limit);
    };

    std::string head =
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nCache-Control: no-cache, private\r\n"
        "Connection: close\r\nTransfer-Encoding: chunked\r\n\r\n";
    stream.expires_never();
    auto [hec, hn] = co_await asio::async_write(stream, asio::buffer(head), tuple_awaitable);
    (void)hn;
    if (hec) {
        stream.close();
        co_return;
    }
    bool client_gone = false;
    auto watch_client = [&]() -> asio::awaitable<void> {
        char b[512];
        for (;;) {
            auto [ec, n] = co_await stream.async_read_some(asio::buffer(b), tuple_awaitable);
            (void)n;
            if (ec) break;
        }
        client_gone = true;
    };
    auto send_loop = [&]() -> asio::awaitable<void> {
        std::vector<char> buf(64 * 1024);
        asio::steady_timer timer(core->executor);
        for (;;) {
            std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), budget()));
            ssize_t n = want == 0 ? 0 : ::pread(fd.fd, buf.data(), want, static_cast<off_t>(offset));
            if (n > 0) {
                offset += static_cast<std::uint64_t>(n);
                sent += static_cast<std::uint64_t>(n);
                char size_line[32];
                int len = std::snprintf(size_line, sizeof size_line, "%zx\r\n", static_cast<std::size_t>(n));
                std::array<asio::const_buffer, 3> parts{asio::buffer(size_line, static_cast<std::size_t>(len)),
                                                        asio::buffer(buf.data(), static_cast<std::size_t>(n)),
                                                        asio::buffer("\r\n", 2)};
                auto [ec, w] = co_await asio::async_write(stream, parts, tuple_awaitable);
                (void)w;
                if (ec) co_return;
                continue;
            }
            if (!follow || budget() == 0 || client_gone) break;
            // Follow: stop once the container is no longer running and the file is drained.
            bool live = pod && !pod->removed && !core->shut_down && !pod->finished;
            if (!live) break;
            timer.expires_after(200ms);
            co_await timer.async_wait(tuple_awaitable);
        }
        auto [ec, w] = co_await asio::async_write(stream, asio::buffer("0\r\n\r\n", 5), tuple_awaitable);
        (void)ec;
        (void)w;
    };
    if (follow) {
        // Both return normally (errors as values), so the race cannot hide an exception.
        auto loop = send_loop();
        auto watch = watch_client();
        co_await (std::move(loop) || std::move(watch));
    } else {
        co_await send_loop();
    }
    co_await stream.async_shutdown(tuple_awaitable);
    stream.close();
}

}  // namespace kubesandbox::local
