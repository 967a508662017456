// Sans-IO parts of the local cluster's sandbox runtime: the HTTP API of agent-sandbox's
// python-runtime (shared/spec/agent-sandbox.md §4) as pure functions. Command splitting as
// POSIX shlex does it, percent-decoding, strict UTF-8 with Python's error text, and the JSON
// bodies (multipart bodies: multipart_reader.hpp). The server (sandbox_runtime.cpp) does the I/O.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kubesandbox::runtime {

// shlex.split(s) in POSIX mode without comments. Errors: "No closing quotation",
// "No escaped character".
struct SplitResult {
    std::vector<std::string> words;
    std::string error;  // empty on success
};
SplitResult shlex_split(std::string_view command);

// urllib.parse.unquote: %XX sequences decoded, malformed ones kept as they are.
std::string percent_decode(std::string_view s);

// Python's repr() of a list of str, as in subprocess's TimeoutExpired text.
std::string python_list_repr(const std::vector<std::string>& items);

// "[Errno 2] No such file or directory: 'x'", as Python's OSError prints.
std::string os_error_text(int err, std::string_view path);

// Empty when `s` is valid UTF-8; otherwise Python's UnicodeDecodeError text.
std::string utf8_decode_error(std::string_view s);

// The base-relative form of a request path as the runtime joins it: leading '/' removed
// (an absolute path means one below the base). The caller resolves symlinks and checks that
// the result stays below the real base.
std::string join_below_base(std::string_view base, std::string_view path);

// `resolved` (a realpath) lies at or below `base` (a realpath), by string prefix as Python's
// startswith check does.
bool within_base(std::string_view resolved, std::string_view base);

// What a request asks for, from its method and decoded target.
struct Route {
    enum class Kind { health, execute, upload, download, list, exists, method_not_allowed, not_found } kind;
    std::string path;  // the file path for download/list/exists, decoded twice as the runtime does
};
Route route_request(std::string_view method, std::string_view target);

// Response bodies.
std::string health_body();
std::string message_body(std::string_view message);  // {"message": ...}
std::string detail_body(std::string_view detail);    // {"detail": ...}
std::string execute_body(std::string_view stdout_text, std::string_view stderr_text, int exit_code);
std::string missing_command_body();  // 422, as pydantic v1 reports a missing field
std::string invalid_json_body();     // 422 for a body that is not a JSON object

// The command field of an /execute body; nullopt when absent or the body is not an object.
std::optional<std::string> execute_command(std::string_view body, bool& malformed);

struct ListEntry {
    std::string name;
    long long size = 0;
    bool directory = false;
    double mod_time = 0;
};
std::string list_body(const std::vector<ListEntry>& entries);
std::string exists_body(std::string_view path, bool exists);

}  // namespace kubesandbox::runtime
