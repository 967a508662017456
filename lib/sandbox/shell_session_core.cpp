#include "sandbox/shell_session_core.hpp"

#include "util/large_string.hpp"

#include <charconv>
#include <climits>

namespace kubesandbox::sandbox {

namespace {

// Reads the session's markers once (the trailers' and the commands' prefix), then forks the
// subshell for the next command before its request arrives, so that the fork and the command's
// launch line ($3 MARKER $4: "KUBESANDBOX_EXEC=", the prefix and the command's number, then the
// rest of the launcher's steps) are done while the client is still sending; a driver that forked
// on receipt measured ~0.1 ms more per command. The subshell reads one request: the command's
// lines each after a '+' (a last line without a newline after a '-'), then the session's marker,
// '.' and the command's number (the marker only the client knows: bytes a command left unread
// can never end a request). It runs the launch line and the command in a fresh `SHELL -c` (its
// own state; `exit` ends only it) with no input. `read` takes a pipe a byte at a time, so
// nothing past the request is consumed, and a request costs a system call per byte. Hence a line
// "*K": it appends the K-th script kept in the driver's arguments after the token (as it is: an
// assignment neither splits nor expands), so that the file operations' fixed scripts cross once
// per session, in the exec's argv. A line "<" gives the command the session's input instead of
// none: the client sends the bytes it is to read right after the request, and nothing more until
// its trailers (a command that fails may leave some unread, which the next subshell reads but can
// never run: the client ends the session). End of input or a malformed request ends the driver
// (SIGKILL: the subshell cannot make the driver exit otherwise); so does a request numbered for
// another subshell: one that was killed before it read its request leaves that request to the
// next, which must not run it unwatched. Then the trailers, "MARKER.N STATUS" for the N-th
// command (137 for one whose subshell was killed). $1 is the shell, $2 is 1 to start each command
// in a process group of its own (`setsid`, when there is one: a program image more per command),
// $5 the session's token, which the kill script looks for. Otherwise commands share the driver's
// group and the driver ignores the signals a command may send its own group (`kill 0`); ignored,
// not caught, so that no read is cut short, and set back to their defaults in the subshell just
// before the command starts. The variables are prefixed so that none can be one the environment
// exported. The driver's own stderr is /dev/null (a shell reports a child killed by a signal
// there, "Terminated", which an exec of its own would not print); the commands' stderr is fd 3,
// closed for them. Their redirections are made in the subshell: dash makes a simple command's own
// in the parent, for as long as it waits, and would report there.
constexpr std::string_view driver_script = R"SH(exec 3>&2 2>/dev/null
read -r _ _ _ _ _ksb_g _ < /proc/$$/stat || _ksb_g=0
_ksb_own= _ksb_t=
if [ "$2" = 1 ] && command -v setsid >/dev/null 2>&1; then _ksb_own=setsid; else _ksb_t='HUP INT QUIT TERM USR1 USR2 ALRM'; trap '' $_ksb_t; fi
printf 'KSB1 %s %s %s\n' "$$" "$_ksb_g" "${_ksb_own:+1}"
IFS=' ' read -r _ksb_m _ksb_k || exit 0
_ksb_n=0
_ksb_nl='
'
while :; do
  (
    _ksb_c="$3$_ksb_k$((_ksb_n + 1))$4" _ksb_i=
    while IFS= read -r _ksb_l || { kill -9 $$; exit 0; }; do
      case $_ksb_l in
        +*) _ksb_c="$_ksb_c${_ksb_l#+}$_ksb_nl" ;;
        -*) _ksb_c="$_ksb_c${_ksb_l#-}" ;;
        [*][1-9] | [*][1-9][0-9])
          _ksb_j=${_ksb_l#?}
          [ "$_ksb_j" -le $(($# - 5)) ] || { kill -9 $$; exit 0; }
          eval "_ksb_c=\$_ksb_c\${$((_ksb_j + 5))}" ;;
        "<") _ksb_i=1 ;;
        "$_ksb_m.$((_ksb_n + 1))") break ;;
        *) kill -9 $$; exit 0 ;;
      esac
    done
    [ -z "$_ksb_t" ] || trap - $_ksb_t
    [ -n "$_ksb_i" ] && exec $_ksb_own "$1" -c "$_ksb_c" 2>&3 3>&-
    exec $_ksb_own "$1" -c "$_ksb_c" </dev/null 2>&3 3>&-
  )
  _ksb_r=$?
  _ksb_n=$((_ksb_n + 1))
  printf '%s.%d %d\n' "$_ksb_m" "$_ksb_n" "$_ksb_r"
  printf '%s.%d\n' "$_ksb_m" "$_ksb_n" >&3
done
)SH";

bool parse_long(std::string_view s, long& out) {
    if (s.empty()) return false;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && end == s.data() + s.size();
}

}  // namespace

std::string_view shell_session_driver() { return driver_script; }

std::string encode_shell_request(std::string_view script, std::string_view session_marker, std::uint64_t command,
                                 std::span<const std::string_view> stored, bool with_input) {
    // The longest stored script the command ends with goes by its number.
    std::size_t stored_number = 0, stored_size = 0;
    for (std::size_t i = 0; i < stored.size() && i < max_stored_scripts; ++i) {
        if (stored[i].size() > stored_size && script.ends_with(stored[i])) {
            stored_number = i + 1;
            stored_size = stored[i].size();
        }
    }
    script.remove_suffix(stored_size);
    std::string out;
    out.reserve(script.size() + 28);
    while (!script.empty()) {
        const std::size_t eol = script.find('\n');
        // '+': the line had a newline; '-': the last one, which had none.
        out.push_back(eol == std::string_view::npos ? '-' : '+');
        out.append(script.substr(0, eol)).push_back('\n');
        if (eol == std::string_view::npos) break;
        script.remove_prefix(eol + 1);
    }
    if (stored_number > 0) {
        // The prefix's last line keeps its newline, or its lack of one ('-'): the script follows
        // it byte for byte.
        out.push_back('*');
        out.append(std::to_string(stored_number)).push_back('\n');
    }
    if (with_input) out.append("<\n");
    out.append(command_trailer(session_marker, command)).push_back('\n');
    return out;
}

std::string command_trailer(std::string_view session_marker, std::uint64_t command) {
    std::string out(session_marker);
    out.push_back('.');
    out.append(std::to_string(command));
    return out;
}

std::string command_exec_marker(std::string_view prefix, std::uint64_t command) {
    std::string out(prefix);
    out.append(std::to_string(command));
    return out;
}

std::optional<DriverHello> parse_driver_hello(std::string_view line) {
    constexpr std::string_view tag = "KSB1 ";
    if (line.substr(0, tag.size()) != tag) return std::nullopt;
    line.remove_prefix(tag.size());
    // "PID PGID GROUPS", GROUPS "1" or empty.
    const std::size_t first = line.find(' ');
    if (first == std::string_view::npos) return std::nullopt;
    const std::size_t second = line.find(' ', first + 1);
    if (second == std::string_view::npos) return std::nullopt;
    DriverHello hello;
    if (!parse_long(line.substr(0, first), hello.pid) ||
        !parse_long(line.substr(first + 1, second - first - 1), hello.process_group))
        return std::nullopt;
    const std::string_view groups = line.substr(second + 1);
    if (hello.pid <= 0 || (groups != "" && groups != "1")) return std::nullopt;
    hello.own_groups = groups == "1";
    return hello;
}

bool TrailerScanner::feed(std::string_view piece, std::string& out, std::size_t cap, bool& truncated) {
    if (done_) {
        if (!piece.empty()) stray_ = true;
        return true;
    }
    if (held_.empty()) return scan(piece, out, cap, truncated);
    std::string joined = std::move(held_);
    held_.clear();
    joined.append(piece);
    return scan(joined, out, cap, truncated);
}

bool TrailerScanner::scan(std::string_view s, std::string& out, std::size_t cap, bool& truncated) {
    const std::size_t at = s.find(marker_);
    if (at == std::string_view::npos) {
        // Hold back the longest end of `s` that could begin the marker.
        std::size_t keep = std::min(s.size(), marker_.size() - 1);
        while (keep > 0 && s.substr(s.size() - keep) != std::string_view(marker_).substr(0, keep)) --keep;
        util::append_capped(out, s.substr(0, s.size() - keep), cap, truncated);
        held_.assign(s.substr(s.size() - keep));
        return true;
    }
    util::append_capped(out, s.substr(0, at), cap, truncated);
    std::string_view rest = s.substr(at + marker_.size());
    if (kind_ == Kind::stderr_bare) {
        if (rest.empty()) {
            held_.assign(marker_);
            return true;
        }
        if (rest.front() != '\n') return false;
        done_ = true;
        stray_ = rest.size() > 1;
        status_ = 0;
        return true;
    }
    // " STATUS\n", STATUS 1 to 10 digits: held back until the newline, refused as soon as what
    // came cannot begin one (the same verdict however the stream was cut).
    const std::size_t eol = rest.find('\n');
    const std::string_view head = rest.substr(0, eol);
    const bool digits_only =
        head.size() <= 11 && (head.empty() || head.front() == ' ') &&
        head.substr(std::min<std::size_t>(1, head.size())).find_first_not_of("0123456789") == std::string_view::npos;
    if (!digits_only) return false;
    if (eol == std::string_view::npos) {
        held_.assign(s.substr(at));
        return true;
    }
    long status = 0;
    if (head.size() < 2 || !parse_long(head.substr(1), status) || status > INT_MAX) return false;
    done_ = true;
    status_ = static_cast<int>(status);
    stray_ = rest.size() > eol + 1;
    return true;
}

}  // namespace kubesandbox::sandbox
