// RouterSandbox's file transfers: the runtime's /upload and /download below its base directory,
// commands elsewhere, whole or streamed (see router_sandbox.hpp).
#include "sandbox/router_internals.hpp"

#include "proto/base64.hpp"
#include "sandbox/byte_streams.hpp"
#include "sandbox/runtime_files.hpp"
#include "sandbox/runtime_protocol.hpp"
#include "sandbox/transfer_status.hpp"
#include "util/random.hpp"

namespace kubesandbox {

namespace asio = boost::asio;
namespace rp = runtime_protocol;
using router_detail::BytesSink;
using router_detail::max_error_body;
using router_detail::RunOutcome;
using router_detail::status_error;
using std::chrono::steady_clock;

namespace {

// upload_from holds a file up to this size and sends it in one request; a larger one streams,
// after an empty upload to the same name (one more round trip).
constexpr std::uint64_t streamed_upload_min_bytes = 1024 * 1024;

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

// The per-file error of a transfer command: the runtime's own failure, or the script's.
std::optional<std::string> command_file_error(const RunOutcome& ran) {
    if (auto failure = rp::runtime_failure(ran.stderr_text, ran.exit_code); !failure.empty())
        return "transfer failed: " + failure;
    return transfer_error(ran.exit_code, ran.stderr_text);
}

bool is_absolute_clean_path(std::string_view p) {
    return !p.empty() && p.front() == '/' && p.find('\0') == std::string_view::npos;
}

}  // namespace

RouterRequest RouterSandbox::Internals::upload_request(const RouterSandbox& self, std::string_view content_type) {
    RouterRequest request;
    request.method = "POST";
    request.target = "/upload";
    add_headers(request, self, content_type);
    return request;
}

steady_clock::time_point RouterSandbox::Internals::transfer_deadline(std::uint64_t bytes) {
    return steady_clock::now() + std::chrono::seconds(60 + bytes / (1024 * 1024));
}

asio::awaitable<Result<unsigned>> RouterSandbox::Internals::post_upload(RouterSandbox& self, const std::string& name,
                                                                        std::string_view data,
                                                                        steady_clock::time_point deadline) {
    auto multipart = rp::multipart_file(name, data, new_boundary());
    RouterRequest request = upload_request(self, multipart.content_type);
    request.body = std::move(multipart.body);
    request.replay_safe = true;  // the same bytes to the same file
    BytesSink sink(max_error_body);
    co_return co_await self.connection_->impl().send(std::move(request), deadline, sink);
}

asio::awaitable<Result<FileUploadResponse>> RouterSandbox::Internals::upload_by_commands(RouterSandbox& self,
                                                                                         std::string path,
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

asio::awaitable<Result<FileUploadResponse>> RouterSandbox::Internals::upload_one(RouterSandbox& self, std::string path,
                                                                                 const std::string& data,
                                                                                 bool limit_size) {
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

asio::awaitable<Result<FileDownloadResponse>> RouterSandbox::Internals::download_by_commands(RouterSandbox& self,
                                                                                             std::string path,
                                                                                             const ByteSink& sink) {
    FileDownloadResponse r{std::move(path), std::nullopt, std::nullopt};
    constexpr std::size_t piece_bytes = rp::download_piece_bytes;
    std::optional<std::uint64_t> total;
    std::uint64_t received = 0;
    for (std::uint64_t index = 0;; ++index) {
        auto ran =
            co_await run(self, rp::execute_body(rp::download_piece_argv(r.path, index)), transfer_deadline(piece_bytes),
                         std::nullopt, piece_bytes / 3 * 4 + piece_bytes / 32 + 64);
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

asio::awaitable<Result<FileDownloadResponse>> RouterSandbox::Internals::download_one(RouterSandbox& self,
                                                                                     std::string path) {
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
        add_headers(request, self, "");
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

std::string RouterSandbox::Internals::new_boundary() { return "kubesandbox-" + util::random_hex(12); }

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
        const auto limit = options_.default_timeout.count() > 0 ? options_.default_timeout : std::chrono::hours(24);
        const auto deadline = steady_clock::now() + limit;
        Internals::add_headers(request, *this, "");
        request.replay_safe = true;  // only when nothing came back
        StreamingSink streaming(sink);
        auto status = co_await connection_->impl().send(std::move(request), deadline, streaming);
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
