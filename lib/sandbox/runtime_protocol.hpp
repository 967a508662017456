// Sans-IO client side of the python-runtime protocol (through a router or not): request bodies,
// the command wrapping the runtime needs (it splits commands with shlex and runs no shell), the
// watchdog that gives execute its timeout, a streaming reader of /execute responses with caps,
// and path quoting. Moving files: runtime_files.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kubesandbox::runtime_protocol {

// Python's urllib.parse.quote(s, safe=''): all but A-Za-z0-9_.-~ percent-encoded ('/' too).
std::string quote_segment(std::string_view s);

// The JSON body of POST /execute that runs `argv` (each element quoted for shlex). Arguments
// that are not UTF-8 cannot travel in JSON: then the body runs sh, which decodes the quoted
// command line from base64 and evals it (needs base64 in the image, as busybox has).
std::string execute_body(const std::vector<std::string>& argv);

// argv running `command` under sh: both streams base64-encoded (the runtime cannot return bytes
// that are not UTF-8) with the exit status after them, and a watchdog that after
// `timeout_seconds` (0 = none) kills the command's process group (the runtime starts every
// command in a process group of its own). decode_run() reads the result.
std::vector<std::string> execute_argv(std::string_view command, std::string_view marker, std::int64_t timeout_seconds);

// execute_body(execute_argv(command, marker, timeout_seconds)), byte for byte, with the
// wrapper's share of the work done once per process.
std::string execute_command_body(std::string_view command, std::string_view marker, std::int64_t timeout_seconds);

// Reads a /execute response body {"stdout","stderr","exit_code"} as it arrives, keeping at most
// `cap` bytes of each stream; the rest is counted, not stored.
class ExecuteResponseReader {
public:
    explicit ExecuteResponseReader(std::size_t cap);
    ~ExecuteResponseReader();
    ExecuteResponseReader(const ExecuteResponseReader&) = delete;
    ExecuteResponseReader& operator=(const ExecuteResponseReader&) = delete;

    // The body's size, when known: a stream past 64 KiB is then sized once for the rest of the
    // body, not regrown (which would hold the old and the new copy at once).
    void expect_body(std::uint64_t bytes);
    bool write(std::string_view chunk);  // false on malformed JSON
    bool finish();                       // false when the document is incomplete or malformed

    // Mutable, so a finished reader's text can be moved out rather than copied.
    std::string& stdout_text();
    std::string& stderr_text();
    std::string& stderr_tail();  // the last bytes of stderr, kept past the cap
    std::optional<std::int64_t> exit_code() const;
    bool truncated() const;  // a stream was longer than the cap

    struct State;

private:
    std::unique_ptr<State> state_;
};

// What a command run by execute_argv() produced, from the /execute response's streams.
struct DecodedRun {
    std::string stdout_bytes, stderr_bytes;
    std::optional<std::int64_t> exit_code;  // from the trailer; plain runs use the runtime's
    bool timed_out = false;
    bool truncated = false;
    bool plain = false;      // no trailer (the wrapper did not run to its end): streams as they came
    bool malformed = false;  // a trailer, but the streams were not base64
};
DecodedRun decode_run(std::string stdout_text, std::string stderr_text, std::string_view stderr_tail, bool truncated,
                      std::string_view marker);

// stdout, then "\n" + stderr when both are non-empty, cut at `cap` (on a UTF-8 boundary when
// the cut falls inside a character).
struct ComposedOutput {
    std::string output;
    bool truncated = false;
};
ComposedOutput compose_output(std::string stdout_text, std::string stderr_text, bool truncated, std::size_t cap);

// What the runtime reports in-band when it could not run or finish a command: stderr
// "Failed to execute command: ..." with exit code 1. Empty when the text is not such a report.
std::string runtime_failure(std::string_view stderr_text, std::int64_t exit_code);

// The runtime's own timeout ("... timed out after 300.0 seconds"): its limit in whole seconds.
std::optional<std::int64_t> runtime_timeout_seconds(std::string_view failure);

}  // namespace kubesandbox::runtime_protocol
