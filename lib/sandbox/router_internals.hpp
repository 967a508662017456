// RouterSandbox's internals shared by its two files: router_sandbox.cpp (execute) and
// router_transfers.cpp (files). Internal.
#pragma once

#include <kubesandbox/router_sandbox.hpp>

#include "connection/router_connection.hpp"

#include <boost/asio/awaitable.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kubesandbox {

namespace router_detail {

constexpr std::size_t max_error_body = 4096;

// What a command run through /execute produced.
struct RunOutcome {
    std::string stdout_text, stderr_text;
    std::string stderr_tail;  // the end of stderr even when the cap cut it
    std::int64_t exit_code = 0;
    bool truncated = false;
};

// An error for a non-200 answer, typed by its status, with the body's "detail" or "message".
Error status_error(unsigned status, std::string_view body, const std::string& what);

// Keeps the start of an error answer's body: up to max_error_body bytes in all.
inline void keep_error_body(std::string& body, std::string_view chunk) {
    body.append(chunk.substr(0, max_error_body - std::min(max_error_body, body.size())));
}

// A response's body, whole up to `cap`; of an answer other than 200, the first max_error_body
// bytes (the rest is read and dropped, so the status still reaches the caller).
class BytesSink final : public ResponseSink {
public:
    explicit BytesSink(std::size_t cap) : cap_(cap) {}
    void on_head(unsigned s, std::string_view) override { status = s; }
    bool on_body(std::string_view chunk) override {
        if (status != 200) {
            keep_error_body(body, chunk);
            return true;
        }
        if (body.size() + chunk.size() > cap_) {
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

}  // namespace router_detail

struct RouterSandbox::Internals {
    using RunOutcome = router_detail::RunOutcome;

    // router_sandbox.cpp
    struct Executed;
    // execute()'s command through the runtime, up to the decoded streams.
    static boost::asio::awaitable<Result<Executed>> execute_command(RouterSandbox& self, std::string command,
                                                                    std::optional<std::chrono::seconds> timeout);
    // The fields naming the sandbox were written once; a request adds its own. Every request
    // carries X-Sandbox-Timeout (at most `router_timeout` seconds when given), so the router ends
    // a slow call with an answer before we give up.
    static void add_headers(RouterRequest& request, const RouterSandbox& self, std::string_view content_type,
                            std::optional<std::int64_t> router_timeout = std::nullopt);
    // One POST /execute with this body; never replayed.
    static boost::asio::awaitable<Result<RunOutcome>> run(RouterSandbox& self, std::string body,
                                                          std::chrono::steady_clock::time_point deadline,
                                                          std::optional<std::int64_t> router_timeout, std::size_t cap);

    // router_transfers.cpp
    static RouterRequest upload_request(const RouterSandbox& self, std::string_view content_type);
    static std::string new_boundary();
    // Transfers get a minute plus a second per MiB.
    static std::chrono::steady_clock::time_point transfer_deadline(std::uint64_t bytes);
    // `data` as the file `name` below the base in one POST /upload: the runtime's status.
    static boost::asio::awaitable<Result<unsigned>> post_upload(RouterSandbox& self, const std::string& name,
                                                                std::string_view data,
                                                                std::chrono::steady_clock::time_point deadline);
    // `path` written by commands (sh + base64 through /execute), a piece from `pieces` at a time
    // (at most upload_piece_bytes, an empty one at the end): for paths the runtime does not
    // write, with raw mode's per-file errors, and through a link out of the base as raw mode does.
    static boost::asio::awaitable<Result<FileUploadResponse>> upload_by_commands(RouterSandbox& self, std::string path,
                                                                                 const ByteSource& pieces);
    // limit_size: apply max_file_bytes (upload_files does; a streamed upload does not).
    static boost::asio::awaitable<Result<FileUploadResponse>> upload_one(RouterSandbox& self, std::string path,
                                                                         const std::string& data, bool limit_size);
    // `path` read by commands a piece at a time into `sink` (for paths the runtime does not
    // serve), so a file of any size costs a piece of memory. Each piece tells the file's size:
    // a piece cut short, or a size that changed, fails the download instead of ending it early.
    static boost::asio::awaitable<Result<FileDownloadResponse>> download_by_commands(RouterSandbox& self,
                                                                                     std::string path,
                                                                                     const ByteSink& sink);
    // The whole file, capped by max_file_bytes (download_files).
    static boost::asio::awaitable<Result<FileDownloadResponse>> download_one(RouterSandbox& self, std::string path);

    // router_queries.cpp
    // GET /<route>/<path below the base>: the body of a 200 (at most `cap` bytes), else a typed error.
    static boost::asio::awaitable<Result<std::string>> read_view(RouterSandbox& self, std::string_view route,
                                                                 const std::string& path, std::size_t cap);
};

}  // namespace kubesandbox
