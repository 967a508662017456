// RouterSandbox: the python-runtime protocol over a RouterConnection (see router_sandbox.hpp).
#include <kubesandbox/router_sandbox.hpp>

#include "connection/router_connection.hpp"
#include "proto/kubeconfig.hpp"
#include "sandbox/byte_streams.hpp"
#include "sandbox/runtime_files.hpp"
#include "sandbox/runtime_protocol.hpp"
#include "sandbox/transfer_status.hpp"
#include "util/random.hpp"

#include <boost/json/parse.hpp>

namespace kubesandbox {

namespace asio = boost::asio;
namespace rp = runtime_protocol;
using std::chrono::steady_clock;

namespace {

constexpr std::size_t max_error_body = 4096;
// upload_from holds a file up to this size and sends it in one request; a larger one streams,
// after an empty upload to the same name (one more round trip).
constexpr std::uint64_t streamed_upload_min_bytes = 1024 * 1024;

// What a command run through /execute produced.
struct RunOutcome {
    std::string stdout_text, stderr_text;
    std::string stderr_tail;  // the end of stderr even when the cap cut it
    std::int64_t exit_code = 0;
    bool truncated = false;
};

class ExecuteSink final : public ResponseSink {
public:
    explicit ExecuteSink(std::size_t cap) : reader(cap) {}
    void on_head(unsigned s, std::string_view) override { status = s; }
    bool on_body(std::string_view chunk) override {
        if (status != 200) {
            error_body.append(chunk.substr(0, max_error_body - std::min(max_error_body, error_body.size())));
            return true;
        }
        if (!reader.write(chunk)) malformed = true;
        return !malformed;
    }
    rp::ExecuteResponseReader reader;
    unsigned status = 0;
    std::string error_body;
    bool malformed = false;
};

class BytesSink final : public ResponseSink {
public:
    explicit BytesSink(std::size_t cap) : cap_(cap) {}
    void on_head(unsigned s, std::string_view) override { status = s; }
    bool on_body(std::string_view chunk) override {
        std::size_t limit = status == 200 ? cap_ : max_error_body;
        if (body.size() + chunk.size() > limit) {
            too_large = true;
            return false;
        }
        body.append(chunk);
        return true;
    }
    unsigned status = 0;
    std::string body;
    bool too_large = false;

private:
    std::size_t cap_;
};

// A download's body handed to a ByteSink as it arrives, a read at a time; any other answer's
// body is dropped (the command that follows tells what went wrong).
class StreamingSink final : public ResponseSink {
public:
    explicit StreamingSink(ByteSink& to) : to_(to) {}
    void on_head(unsigned s, std::string_view) override { status = s; }
    bool on_body(std::string_view chunk) override {
        if (status == 200) pending_.append(chunk);
        return true;
    }
    bool drains() const override { return true; }
    asio::awaitable<bool> drain() override {
        if (pending_.empty()) co_return true;
        const bool go = co_await to_(pending_);
        pending_.clear();
        stopped = stopped || !go;
        co_return go;
    }
    unsigned status = 0;
    bool stopped = false;

private:
    ByteSink& to_;
    std::string pending_;
};

// The "detail" or "message" of an error body, else its start.
std::string error_text(std::string_view body) {
    boost::system::error_code ec;
    auto v = boost::json::parse(body, ec);
    if (!ec && v.is_object()) {
        for (const char* key : {"detail", "message"}) {
            if (auto* d = v.get_object().if_contains(key); d && d->is_string()) return std::string(d->get_string());
        }
    }
    return std::string(body.substr(0, 200));
}

Error status_error(unsigned status, std::string_view body, const std::string& what) {
    std::string text = what + ": HTTP " + std::to_string(status) + ": " + error_text(body);
    switch (status) {
        case 401:
            return make_error(errc::unauthorized, text);
        case 403:
            return make_error(errc::forbidden, text);
        case 404:
            return make_error(errc::not_found, text);
        case 422:
            return make_error(errc::invalid, text);
        case 502:
        case 503:
            return make_error(errc::service_unavailable, text);
        case 504:
            return make_error(errc::server_timeout, text);
        default:
            return make_error(errc::unknown_status, text);
    }
}

// The per-file error of a transfer command: the runtime's own failure, or the script's.
std::optional<std::string> command_file_error(const RunOutcome& ran) {
    if (auto failure = rp::runtime_failure(ran.stderr_text, ran.exit_code); !failure.empty())
        return "transfer failed: " + failure;
    return transfer_error(ran.exit_code, ran.stderr_text);
}

ExecuteResponse timed_out_response(std::int64_t seconds) {
    ExecuteResponse r;
    r.output = "Command timed out after " + std::to_string(seconds) + " seconds";
    r.exit_code = 124;
    return r;
}

bool is_absolute_clean_path(std::string_view p) {
    return !p.empty() && p.front() == '/' && p.find('\0') == std::string_view::npos;
}

}  // namespace

struct RouterSandbox::Internals {
    // The fields naming the sandbox were written once; a request adds its own.
    static void add_headers(RouterRequest& request, const RouterSandbox& self,
                            std::optional<std::int64_t> router_timeout, std::string_view content_type) {
        request.fields.reserve(self.sandbox_fields_.size() + 64 + content_type.size());
        request.fields = self.sandbox_fields_;
        request.bad_field = !self.sandbox_fields_ok_;
        if (router_timeout) request.add_header("X-Sandbox-Timeout", std::to_string(*router_timeout));
        if (!content_type.empty()) request.add_header("Content-Type", content_type);
    }

    // One POST /execute with this body; never replayed.
    static asio::awaitable<Result<RunOutcome>> run(RouterSandbox& self, std::string body,
                                                   steady_clock::time_point deadline,
                                                   std::optional<std::int64_t> router_timeout, std::size_t cap) {
        RouterRequest request;
        request.method = "POST";
        request.target = "/execute";
        add_headers(request, self, router_timeout, "application/json");
        request.body = std::move(body);
        ExecuteSink sink(cap);
        auto what = [&self] { return "execute in " + self.id_ + " via " + self.connection_->describe(); };
        auto status = co_await self.connection_->impl().send(std::move(request), deadline, sink);
        if (!status) {
            Error e = status.error();
            if (sink.malformed) e = make_error(errc::invalid_response, what() + ": malformed /execute response");
            co_return fail(std::move(e));
        }
        if (*status != 200) co_return fail(status_error(*status, sink.error_body, what()));
        if (!sink.reader.finish() || !sink.reader.exit_code())
            co_return fail(errc::invalid_response, what() + ": malformed /execute response");
        RunOutcome out;
        out.stdout_text = std::move(sink.reader.stdout_text());
        out.stderr_text = std::move(sink.reader.stderr_text());
        out.stderr_tail = std::move(sink.reader.stderr_tail());
        out.exit_code = *sink.reader.exit_code();
        out.truncated = sink.reader.truncated();
        co_return out;
    }

    static RouterRequest upload_request(const RouterSandbox& self, std::string_view content_type) {
        RouterRequest request;
        request.method = "POST";
        request.target = "/upload";
        add_headers(request, self, std::nullopt, content_type);
        return request;
    }

    static std::string new_boundary() { return "kubesandbox-" + util::random_hex(12); }

    // Transfers get a minute plus a second per MiB.
    static steady_clock::time_point transfer_deadline(std::uint64_t bytes) {
        return steady_clock::now() + std::chrono::seconds(60 + bytes / (1024 * 1024));
    }

    // `data` as the file `name` below the base in one POST /upload: the runtime's status.
    static asio::awaitable<Result<unsigned>> post_upload(RouterSandbox& self, const std::string& name,
                                                         std::string_view data, steady_clock::time_point deadline) {
        auto multipart = rp::multipart_file(name, data, new_boundary());
        RouterRequest request = upload_request(self, multipart.content_type);
        request.body = std::move(multipart.body);
        request.replay_safe = true;  // the same bytes to the same file
        BytesSink sink(max_error_body);
        co_return co_await self.connection_->impl().send(std::move(request), deadline, sink);
    }

    // `path` written by commands (sh + base64 through /execute), a piece from `pieces` at a time
    // (at most upload_piece_bytes, an empty one at the end): for paths the runtime does not
    // write, with raw mode's per-file errors, and through a link out of the base as raw mode does.
    static asio::awaitable<Result<FileUploadResponse>> upload_by_commands(RouterSandbox& self, std::string path,
                                                                          const ByteSource& pieces) {
        FileUploadResponse r{std::move(path), std::nullopt};
        for (bool first = true;; first = false) {
            auto piece = co_await pieces();
            if (!piece) co_return fail(piece.error());
            if (piece->empty() && !first) co_return r;  // an empty file still takes its one command
            // Each piece has its own deadline: a streamed file has no size limit.
            auto ran = co_await run(self, rp::execute_body(rp::upload_piece_argv(r.path, *piece, first)),
                                    transfer_deadline(piece->size()), std::nullopt, 4096);
            if (!ran) co_return fail(ran.error());
            if (auto e = command_file_error(*ran)) {
                r.error = std::move(e);
                co_return r;
            }
            if (piece->empty()) co_return r;
        }
    }

    // limit_size: apply max_file_bytes (upload_files does; a streamed upload does not).
    static asio::awaitable<Result<FileUploadResponse>> upload_one(RouterSandbox& self, std::string path,
                                                                  const std::string& data, bool limit_size) {
        FileUploadResponse r{path, std::nullopt};
        if (!is_absolute_clean_path(path)) {
            r.error = file_error::invalid_path;
            co_return r;
        }
        if (limit_size && data.size() > self.options_.max_file_bytes) {
            r.error = file_error::file_too_large;
            co_return r;
        }
        auto deadline = transfer_deadline(data.size());
        if (auto name = rp::runtime_relative_name(self.options_.base_dir, path)) {
            auto status = co_await post_upload(self, *name, data, deadline);
            if (!status) co_return fail(status.error());
            if (*status == 200) co_return r;
            // 403 (a symlink out of the base), 500 (a directory, no permission): the commands
            // below tell which, or write through the link as raw mode would.
        }
        std::size_t offset = 0;
        ByteSource pieces = [&]() -> asio::awaitable<Result<std::string_view>> {
            std::string_view piece = std::string_view(data).substr(offset, rp::upload_piece_bytes);
            offset += piece.size();
            co_return piece;
        };
        co_return co_await upload_by_commands(self, std::move(path), pieces);
    }

    // `path` read by commands a piece at a time into `sink` (for paths the runtime does not
    // serve), so a file of any size costs a piece of memory. Each piece tells the file's size:
    // a piece cut short, or a size that changed, fails the download instead of ending it early.
    static asio::awaitable<Result<FileDownloadResponse>> download_by_commands(RouterSandbox& self, std::string path,
                                                                              const ByteSink& sink) {
        FileDownloadResponse r{std::move(path), std::nullopt, std::nullopt};
        constexpr std::size_t piece_bytes = rp::download_piece_bytes;
        std::optional<std::uint64_t> total;
        std::uint64_t received = 0;
        for (std::uint64_t index = 0;; ++index) {
            auto ran =
                co_await run(self, rp::execute_body(rp::download_piece_argv(r.path, index)),
                             transfer_deadline(piece_bytes), std::nullopt, piece_bytes / 3 * 4 + piece_bytes / 32 + 64);
            if (!ran) co_return fail(ran.error());
            if (auto e = command_file_error(*ran)) {
                r.error = std::move(e);
                co_return r;
            }
            auto piece = ran->truncated ? std::nullopt : rp::parse_download_piece(ran->stdout_text);
            if (!piece) {
                r.error = "transfer failed: unreadable answer from the sandbox";
                co_return r;
            }
            if (!total) total = piece->file_size;
            const std::uint64_t expected = std::min<std::uint64_t>(piece_bytes, *total - received);
            if (piece->file_size != *total || piece->bytes.size() != expected) {
                r.error = "transfer failed: the file changed or could not be read during the download";
                co_return r;
            }
            if (!piece->bytes.empty() && !co_await sink(piece->bytes))
                co_return fail(errc::cancelled, "the sink stopped the download of " + r.path);
            received += piece->bytes.size();
            if (received == *total) co_return r;
        }
    }

    static asio::awaitable<Result<FileDownloadResponse>> download_one(RouterSandbox& self, std::string path) {
        FileDownloadResponse r{path, std::nullopt, std::nullopt};
        if (!is_absolute_clean_path(path)) {
            r.error = file_error::invalid_path;
            co_return r;
        }
        const std::size_t max = self.options_.max_file_bytes;
        auto deadline = steady_clock::now() + std::chrono::seconds(60 + max / (1024 * 1024));
        if (auto name = rp::runtime_relative_name(self.options_.base_dir, path)) {
            RouterRequest request;
            request.method = "GET";
            request.target = "/download/" + rp::quote_segment(*name);
            add_headers(request, self, std::nullopt, "");
            request.replay_safe = true;
            BytesSink sink(max);
            auto status = co_await self.connection_->impl().send(std::move(request), deadline, sink);
            if (!status && sink.too_large && sink.status == 200) {
                r.error = file_error::file_too_large;
                co_return r;
            }
            if (!status) co_return fail(status.error());
            if (*status == 200) {
                r.content = std::move(sink.body);
                co_return r;
            }
            // 404 (missing or a directory), 403 (a symlink out of the base): the command tells.
        }
        auto ran = co_await run(self, rp::execute_body(rp::download_argv(path, max)), deadline, std::nullopt,
                                max / 3 * 4 + max / 32 + 64);
        if (!ran) co_return fail(ran.error());
        if (auto e = command_file_error(*ran)) {
            r.error = std::move(e);
            co_return r;
        }
        auto bytes = proto::base64_decode(ran->stdout_text);
        if (!bytes || ran->truncated) {
            r.error = "transfer failed: unreadable base64 from the sandbox";
            co_return r;
        }
        r.content = std::move(*bytes);
        co_return r;
    }
};

RouterSandbox::RouterSandbox(std::shared_ptr<RouterConnection> connection, RouterSandboxOptions options)
    : connection_(std::move(connection)),
      options_(std::move(options)),
      id_(options_.id.empty() ? options_.namespace_name + "/" + options_.sandbox_name : options_.id) {
    RouterRequest fields;
    fields.add_header("X-Sandbox-ID", options_.sandbox_name);
    fields.add_header("X-Sandbox-Namespace", options_.namespace_name);
    fields.add_header("X-Sandbox-Port", std::to_string(options_.port));
    if (options_.pod_ip) fields.add_header("X-Sandbox-Pod-IP", *options_.pod_ip);
    sandbox_fields_ = std::move(fields.fields);
    sandbox_fields_ok_ = !fields.bad_field;
}

RouterSandbox::~RouterSandbox() = default;

asio::awaitable<Result<ExecuteResponse>> RouterSandbox::execute(std::string command,
                                                                std::optional<std::chrono::seconds> timeout) {
    if (command.find('\0') != std::string::npos)
        co_return fail(errc::invalid_argument, "the command contains a NUL byte");
    if (timeout && timeout->count() < 0) co_return fail(errc::invalid_argument, "negative timeout");
    const std::int64_t limit = timeout.value_or(options_.default_timeout).count();
    const std::string marker = "kubesandbox-timeout-" + util::random_hex(8);
    // The watchdog in the sandbox fires first; the router gives up a little later and our own
    // deadline later still, so a slow call ends with a clean answer where possible.
    std::optional<std::int64_t> router_timeout;
    auto deadline = steady_clock::now() + std::chrono::hours(24);
    if (limit > 0) {
        router_timeout = limit + 5;
        deadline = steady_clock::now() + std::chrono::seconds(limit + 15);
    }
    // Output travels base64-encoded: the cap applies to the encoded text (4/3, plus line breaks).
    const std::size_t cap = options_.max_output_bytes;
    const std::size_t encoded_cap = cap / 3 * 4 + cap / 57 + 256;
    auto ran = co_await Internals::run(*this, rp::execute_command_body(command, marker, limit), deadline,
                                       router_timeout, encoded_cap);
    if (!ran) co_return fail(ran.error());
    if (options_.on_activity) options_.on_activity();
    if (auto failure = rp::runtime_failure(ran->stderr_text, ran->exit_code); !failure.empty()) {
        if (auto runtime_limit = rp::runtime_timeout_seconds(failure)) co_return timed_out_response(*runtime_limit);
        ExecuteResponse r;
        r.output = "Failed to execute command: " + failure;
        r.exit_code = 1;
        co_return r;
    }
    auto decoded = rp::decode_run(std::move(ran->stdout_text), std::move(ran->stderr_text), ran->stderr_tail,
                                  ran->truncated, marker);
    if (decoded.timed_out) co_return timed_out_response(limit);
    if (decoded.malformed)
        co_return fail(errc::invalid_response, "execute in " + id_ + ": the command's output came back garbled");
    auto composed =
        rp::compose_output(std::move(decoded.stdout_bytes), std::move(decoded.stderr_bytes), decoded.truncated, cap);
    ExecuteResponse r;
    r.output = std::move(composed.output);
    r.truncated = composed.truncated;
    std::int64_t code = decoded.plain ? ran->exit_code : decoded.exit_code.value_or(ran->exit_code);
    // The runtime reports a signal as -N (Python's returncode); a shell says 128+N.
    r.exit_code = static_cast<int>(code < 0 ? 128 - code : code);
    co_return r;
}

asio::awaitable<Result<std::vector<FileUploadResponse>>> RouterSandbox::upload_files(
    std::vector<std::pair<std::string, std::string>> files) {
    std::vector<FileUploadResponse> out;
    out.reserve(files.size());
    for (auto& [path, data] : files) {
        auto one = co_await Internals::upload_one(*this, path, data, true);
        if (!one) co_return fail(one.error());
        out.push_back(std::move(*one));
    }
    if (options_.on_activity && !files.empty()) options_.on_activity();
    co_return out;
}

asio::awaitable<Result<std::vector<FileDownloadResponse>>> RouterSandbox::download_files(
    std::vector<std::string> paths) {
    std::vector<FileDownloadResponse> out;
    out.reserve(paths.size());
    for (auto& path : paths) {
        auto one = co_await Internals::download_one(*this, path);
        if (!one) co_return fail(one.error());
        out.push_back(std::move(*one));
    }
    if (options_.on_activity && !paths.empty()) options_.on_activity();
    co_return out;
}

// Up to a MiB, one request as upload_files sends it. A larger file below base_dir goes to
// POST /upload as it is read, once an empty upload showed that the runtime writes there; other
// paths, and those the runtime refuses, are written by commands a piece at a time.
asio::awaitable<Result<FileUploadResponse>> RouterSandbox::upload_from(std::string path, std::uint64_t size,
                                                                       ByteSource source) {
    if (!is_absolute_clean_path(path)) co_return FileUploadResponse{std::move(path), file_error::invalid_path};
    std::optional<Result<FileUploadResponse>> done;
    if (size <= streamed_upload_min_bytes) {
        auto data = co_await sandbox::collect(std::move(source), size);
        if (!data) co_return fail(data.error());
        done = co_await Internals::upload_one(*this, std::move(path), *data, false);
    } else {
        ByteSource held = sandbox::exactly(std::move(source), size);
        const auto deadline = Internals::transfer_deadline(size);
        if (auto name = rp::runtime_relative_name(options_.base_dir, path)) {
            auto probe = co_await Internals::post_upload(*this, *name, "", deadline);
            if (!probe) co_return fail(probe.error());
            if (*probe == 200) {
                auto frame = rp::multipart_frame(*name, Internals::new_boundary());
                RouterRequest request = Internals::upload_request(*this, frame.content_type);
                request.body_size = frame.before.size() + size + frame.after.size();
                request.body_source = sandbox::framed(std::move(frame.before), std::move(held), std::move(frame.after));
                BytesSink sink(max_error_body);
                auto status = co_await connection_->impl().send(std::move(request), deadline, sink);
                if (!status) co_return fail(status.error());
                FileUploadResponse r{std::move(path), std::nullopt};
                // Refused after the empty upload was taken: the place changed in between.
                if (*status != 200)
                    r.error = "transfer failed: " + status_error(*status, sink.body, "POST /upload").message;
                done = std::move(r);
            }
        }
        if (!done)
            done = co_await Internals::upload_by_commands(*this, std::move(path),
                                                          sandbox::regrouped(std::move(held), rp::upload_piece_bytes));
    }
    if (*done && options_.on_activity) options_.on_activity();
    co_return std::move(*done);
}

// Below base_dir, GET /download straight into the sink; elsewhere, and for a download the
// runtime refused (missing, a directory, a link out of the base), commands a piece at a time.
asio::awaitable<Result<FileDownloadResponse>> RouterSandbox::download_to(std::string path, ByteSink sink) {
    auto name = is_absolute_clean_path(path) ? rp::runtime_relative_name(options_.base_dir, path) : std::nullopt;
    if (name) {
        RouterRequest request;
        request.method = "GET";
        request.target = "/download/" + rp::quote_segment(*name);
        Internals::add_headers(request, *this, std::nullopt, "");
        request.replay_safe = true;  // only when nothing came back
        const auto limit = options_.default_timeout.count() > 0 ? options_.default_timeout : std::chrono::hours(24);
        StreamingSink streaming(sink);
        auto status = co_await connection_->impl().send(std::move(request), steady_clock::now() + limit, streaming);
        if (!status && streaming.stopped) co_return fail(errc::cancelled, "the sink stopped the download of " + path);
        if (!status) co_return fail(status.error());
        if (*status == 200) {
            if (options_.on_activity) options_.on_activity();
            co_return FileDownloadResponse{std::move(path), std::nullopt, std::nullopt};
        }
    }
    if (!is_absolute_clean_path(path))
        co_return FileDownloadResponse{std::move(path), std::nullopt, file_error::invalid_path};
    auto done = co_await Internals::download_by_commands(*this, std::move(path), sink);
    if (done && options_.on_activity) options_.on_activity();
    co_return done;
}

}  // namespace kubesandbox
