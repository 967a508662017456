// Sans-IO client side of moving files with the python-runtime: the multipart body of
// POST /upload, which paths the HTTP endpoints can carry, the commands (sh + base64 in the
// sandbox) that move files they cannot, and the answers of GET /list and GET /exists.
#pragma once

#include <kubesandbox/router_sandbox.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kubesandbox::runtime_protocol {

// multipart/form-data with one part "file" named `filename`: what goes before the file's bytes
// and what after, for a body sent as it is read.
struct MultipartFrame {
    std::string content_type;
    std::string before;
    std::string after;
};
MultipartFrame multipart_frame(std::string_view filename, std::string_view boundary);

// The same body in one string.
struct MultipartBody {
    std::string content_type;
    std::string body;
};
MultipartBody multipart_file(std::string_view filename, std::string_view data, std::string_view boundary);

// The base-relative name to use with /upload or /download for the absolute `path`, or nullopt
// when the path must go through commands: outside `base`, the base itself, names the runtime
// would read differently (a '%' is decoded twice; quotes, backslashes and control characters do
// not survive the multipart header) or not UTF-8.
std::optional<std::string> runtime_relative_name(std::string_view base, std::string_view path);

// The segment after /list/ or /exists/ for `path`, quoted: "." for the base itself, else
// runtime_relative_name's; nullopt as there.
std::optional<std::string> runtime_view_segment(std::string_view base, std::string_view path);

// GET /list's body: [{"name","size","type":"file"|"directory","mod_time"}, ...]. nullopt when
// it is not that (an entry of another type, a negative size, a name missing).
std::optional<std::vector<RuntimeEntry>> parse_listing(std::string_view body);
// GET /exists' body: {"path", "exists": bool}. nullopt when it is not that.
std::optional<bool> parse_exists(std::string_view body);

// Commands that move one file without the HTTP endpoints (sh + base64 in the sandbox). Their
// exit codes are read by transfer_error (sandbox/transfer_status.hpp).
// Uploads go in pieces (an argument is at most 128 KiB): the first truncates, the rest append.
inline constexpr std::size_t upload_piece_bytes = 64 * 1024;
std::vector<std::string> upload_piece_argv(std::string_view path, std::string_view piece, bool first);
std::vector<std::string> download_argv(std::string_view path, std::size_t max_bytes);
// A download in pieces, for files of any size: piece `index` (from 0) of download_piece_bytes,
// with the file's size at that moment (parse_download_piece reads both). A non-regular file is
// refused (exit 24), since it has no size to stop at.
inline constexpr std::size_t download_piece_bytes = 1024 * 1024;
std::vector<std::string> download_piece_argv(std::string_view path, std::uint64_t index);
struct DownloadPiece {
    std::uint64_t file_size = 0;
    std::string bytes;
};
// nullopt when the output is not a size line and base64.
std::optional<DownloadPiece> parse_download_piece(std::string_view stdout_text);

}  // namespace kubesandbox::runtime_protocol
