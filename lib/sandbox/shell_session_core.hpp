// The sans-IO half of a shell session: one long-lived exec of a small driver script that runs
// the commands it reads on stdin one after the other, each in a fresh `sh -c`, and ends each
// command's output with a trailer carrying a marker only the client knows. Internal.
//
// Wire format (stdin): a line holding the session's marker, a space and the prefix of its
// commands' markers, once; then per command each line of the command prefixed with '+' (a last
// line without a newline with '-'), or for a command that ends with a script the driver was started
// with, its prefix so and a line "*" K for the K-th script; a line "<" when the command reads the
// bytes sent right after its request (else its stdin is empty); then a line MARKER "." N for the
// N-th command (from 1), the session's marker making sure that bytes a command left unread never
// end a request. The driver
// answers on stdout with "KSB1 PID PGID GROUPS\n" once at start (GROUPS "1" when each command
// gets a process group of its own, else empty), then after the N-th command "MARKER.N STATUS\n"
// on stdout and "MARKER.N\n" on stderr. The N-th command runs as `SHELL -c SCRIPT`, SCRIPT being
// HEAD, PREFIX, N, TAIL and the command written one after the other.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace kubesandbox::sandbox {

// The driver, run as `SHELL -c DRIVER sh SHELL OWN_GROUPS HEAD TAIL TOKEN [SCRIPT...]` (OWN_GROUPS
// "1" or "0"; HEAD and TAIL: the launch line around each command's marker; the SCRIPTs, at most
// max_stored_scripts: ends of commands it keeps, so that requests can name them).
std::string_view shell_session_driver();
inline constexpr std::size_t max_stored_scripts = 99;

// The request that makes the driver run `command` (which holds no NUL) as the `number`-th command
// (from 1) of the session whose marker is `session_marker`; `stored`: the SCRIPTs the driver was started with, in
// order. `with_input`: the command's stdin is the session's (the bytes sent after the request), not empty.
std::string encode_shell_request(std::string_view command, std::string_view session_marker, std::uint64_t number,
                                 std::span<const std::string_view> stored = {}, bool with_input = false);

// The marker of the `command`-th command (from 1) of a session whose prefix (letters and digits
// only) is `prefix`.
std::string command_exec_marker(std::string_view prefix, std::uint64_t command);

// The trailer's marker after the `command`-th command (from 1) of a session whose marker (letters
// and digits only) is `session_marker`.
std::string command_trailer(std::string_view session_marker, std::uint64_t command);

struct DriverHello {
    long pid{};
    long process_group{};
    bool own_groups{};  // each command leads a process group of its own (setsid)
    bool leads_group() const { return pid > 0 && pid == process_group; }
};

// Parses the driver's first line (without its newline); nullopt when it is not one.
std::optional<DriverHello> parse_driver_hello(std::string_view line);

// Finds the end of one command's output in one stream. Feed the stream's pieces in order: each
// call appends the command's own bytes to `out` (up to `cap`, setting `truncated` past it) and
// holds back only what might be the start of the trailer.
class TrailerScanner {
public:
    enum class Kind { stdout_with_status, stderr_bare };
    TrailerScanner(std::string marker, Kind kind) : marker_(std::move(marker)), kind_(kind) {}

    // Returns false on a malformed trailer (the marker followed by something else).
    bool feed(std::string_view piece, std::string& out, std::size_t cap, bool& truncated);

    bool done() const { return done_; }
    int status() const { return status_; }
    // Bytes that came after the trailer: output of something the command left running.
    bool stray() const { return stray_; }

private:
    // Handles `s` (held-back bytes and the new piece); returns false on a malformed trailer.
    bool scan(std::string_view s, std::string& out, std::size_t cap, bool& truncated);

    std::string marker_;
    Kind kind_;
    std::string held_;
    bool done_{};
    bool stray_{};
    int status_{-1};
};

}  // namespace kubesandbox::sandbox
