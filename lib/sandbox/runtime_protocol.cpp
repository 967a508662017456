#include "sandbox/runtime_protocol.hpp"

#include "files/text.hpp"
#include "proto/base64.hpp"

#include <kubesandbox/sandbox.hpp>

#include <boost/json/basic_parser_impl.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/string.hpp>

namespace kubesandbox::runtime_protocol {

namespace json = boost::json;

std::string quote_segment(std::string_view s) {
    static const char* hex = "0123456789ABCDEF";
    std::string out;
    for (unsigned char c : s) {
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
            c == '-' || c == '~') {
            out += static_cast<char>(c);
        } else {
            out += '%';
            out += hex[c >> 4];
            out += hex[c & 15];
        }
    }
    return out;
}

namespace {

std::string join_quoted(const std::vector<std::string>& argv) {
    std::string line;
    for (const auto& a : argv) {
        if (!line.empty()) line += ' ';
        line += files::shell_quote(a);
    }
    return line;
}

}  // namespace

std::string execute_body(const std::vector<std::string>& argv) {
    std::string line = join_quoted(argv);
    if (!files::valid_utf8(line)) {
        line = "sh -c " + files::shell_quote("eval \"$(printf %s " + proto::base64_encode(line) + " | base64 -d)\"");
    }
    return json::serialize(json::object{{"command", line}});
}

// $1 marker, $2 timeout seconds (0 = none), $3 the command. The runtime returns output as JSON
// text and refuses output that is not UTF-8, so both streams travel base64-encoded (streaming
// through base64, nothing stored) and the exit status follows on stderr as "<marker>-base64 N";
// the status comes back through fd 5 into a command substitution (no temporary file, so a
// read-only root works). After the timeout the watchdog writes "<marker>-timeout" and kills the
// process group (the runtime starts each command in one of its own). The watchdog's sleep holds
// none of the runtime's pipes, and a TERM ends it with its sleep, so nothing is left behind. A
// shell runs traps between commands, and `wait` returns early only for a signal still pending,
// so the trap itself kills the sleep once $s names it: a TERM whose trap ran after the `[ -n
// "$k" ]` check and before `wait` began left the watchdog waiting out the whole timeout, and the
// execute with it (about once in 14,000 quick commands on a loaded machine). A TERM before `s=$!`
// is recorded and acted on after it. The sleep gets KILL, not TERM: a forked child still runs
// the parent's trap handler until it resets it, so a TERM landing there was only recorded and
// lost at exec, leaving the sleep (about 1 in 1,200 quick commands on a loaded machine). The
// watchdog's own stderr is /dev/null, its timeout line goes out on fd 3: when the trap kills the
// sleep just before `wait`, busybox's `wait` reports "Killed", which reached the command's
// stderr ahead of the trailer (about once in 15,000 quick commands on a loaded machine).
constexpr const char* watchdog_script = R"SH(m=$1; t=$2; w=
exec 4>&1
if [ "$t" -gt 0 ] 2>/dev/null; then
  ( k=; s=; trap 'k=1; [ -z "$s" ] || kill -KILL "$s" 2>/dev/null' TERM
    sleep "$t" </dev/null >/dev/null 2>&1 3>&- & s=$!
    [ -n "$k" ] || wait "$s"
    if [ -n "$k" ]; then kill -KILL "$s" 2>/dev/null; exit 0; fi
    printf '\n%s-timeout\n' "$m" >&3
    kill -KILL 0 ) </dev/null >/dev/null 3>&2 2>/dev/null 4>&- &
  w=$!
fi
r=$( { { { sh -c "$3" 2>&1 1>&3 3>&- 4>&- 5>&-; echo "$?" >&5; } | base64 >&2 5>&-; } 3>&1 | base64 >&4 5>&-; } 5>&1 )
[ -n "$r" ] || r=255
if [ -n "$w" ]; then kill "$w" 2>/dev/null; wait "$w" 2>/dev/null; fi
printf '\n%s-base64 %s\n' "$m" "$r" >&2
exit "$r"
)SH";

std::vector<std::string> execute_argv(std::string_view command, std::string_view marker, std::int64_t timeout_seconds) {
    return {
        "sh", "-c", watchdog_script, "sh", std::string(marker), std::to_string(timeout_seconds), std::string(command)};
}

namespace {

// Appends the JSON string content (no quotes) of shell_quote(arg): one pass, no intermediate
// strings. Escapes as Boost.JSON's serializer does (", \\, control bytes; the rest as is), so
// the body is the same bytes as execute_body's.
void append_json_quoted_arg(std::string& out, std::string_view arg) {
    constexpr const char* hex = "0123456789abcdef";
    out.push_back('\'');
    for (char c : arg) {
        const auto u = static_cast<unsigned char>(c);
        if (c == '\'') {
            out.append("'\\\\''");  // '\'' with its backslash escaped for JSON
        } else if (c == '"' || c == '\\') {
            out.push_back('\\');
            out.push_back(c);
        } else if (u < 0x20) {
            switch (c) {
                case '\b':
                    out.append("\\b");
                    break;
                case '\t':
                    out.append("\\t");
                    break;
                case '\n':
                    out.append("\\n");
                    break;
                case '\f':
                    out.append("\\f");
                    break;
                case '\r':
                    out.append("\\r");
                    break;
                default:
                    out.append("\\u00");
                    out.push_back(hex[u >> 4]);
                    out.push_back(hex[u & 15]);
            }
        } else {
            out.push_back(c);
        }
    }
    out.push_back('\'');
}

}  // namespace

std::string execute_command_body(std::string_view command, std::string_view marker, std::int64_t timeout_seconds) {
    if (!files::valid_utf8(command) || !files::valid_utf8(marker))
        return execute_body(execute_argv(command, marker, timeout_seconds));
    // Quoting and escaping are per character, so the wrapper's part of the line (the same for
    // every command, ~1 KB) is done once; each call quotes and escapes only its own arguments.
    static const std::string head = [] {
        std::string escaped = json::serialize(json::string_view(join_quoted({"sh", "-c", watchdog_script, "sh"})));
        escaped.pop_back();  // the closing quote: the line goes on
        return "{\"command\":" + escaped + " ";
    }();
    const std::string timeout = std::to_string(timeout_seconds);
    std::string body;
    body.reserve(head.size() + marker.size() + timeout.size() + command.size() + command.size() / 8 + 16);
    body.append(head);
    append_json_quoted_arg(body, marker);
    body.push_back(' ');
    append_json_quoted_arg(body, timeout);
    body.push_back(' ');
    append_json_quoted_arg(body, command);
    body.append("\"}");
    return body;
}

// A boost::json::basic_parser handler that keeps the top-level "stdout"/"stderr" strings (capped)
// and "exit_code".
struct ExecuteHandler {
    static constexpr std::size_t max_object_size = std::size_t(-1);
    static constexpr std::size_t max_array_size = std::size_t(-1);
    static constexpr std::size_t max_key_size = std::size_t(-1);
    static constexpr std::size_t max_string_size = std::size_t(-1);

    std::size_t cap = 0;
    std::optional<std::uint64_t> body_left;  // from the start of the chunk being read
    int depth = 0;
    std::string key;
    std::string out, err;
    std::string err_tail;  // the last bytes of stderr, kept past the cap (the trailer lives there)
    std::optional<std::int64_t> exit_code;
    bool truncated = false;
    bool top_is_object = false;

    std::string* target() {
        if (depth != 1) return nullptr;
        if (key == "stdout") return &out;
        if (key == "stderr") return &err;
        return nullptr;
    }
    void append(std::string_view s) {
        if (depth == 1 && key == "stderr") {
            err_tail.append(s);
            if (err_tail.size() > 1024) err_tail.erase(0, err_tail.size() - 512);
        }
        if (auto* t = target()) {
            std::size_t room = t->size() < cap ? cap - t->size() : 0;
            if (s.size() > room) truncated = true;
            const std::string_view piece = s.substr(0, room);
            // Past 64 KiB a stream is sized once for what is left of the body (capped), where it
            // would otherwise regrow and hold the old and the new buffer at once. Smaller streams
            // grow as usual, so a short stdout before a long stderr reserves nothing.
            constexpr std::size_t reserve_from = 64 * 1024;
            const std::size_t need = t->size() + piece.size();
            if (body_left && need > t->capacity() && need > reserve_from) {
                const std::uint64_t whole = t->size() + std::max<std::uint64_t>(*body_left, piece.size());
                t->reserve(static_cast<std::size_t>(std::min<std::uint64_t>(whole, cap)));
            }
            t->append(piece);
        }
    }

    bool on_document_begin(json::error_code&) { return true; }
    bool on_document_end(json::error_code&) { return true; }
    // A value that is an object or array uses up its key, as a scalar does.
    bool on_object_begin(json::error_code&) {
        if (depth == 0) top_is_object = true;
        ++depth;
        key.clear();
        return true;
    }
    bool on_object_end(std::size_t, json::error_code&) {
        --depth;
        return true;
    }
    bool on_array_begin(json::error_code&) {
        ++depth;
        key.clear();
        return true;
    }
    bool on_array_end(std::size_t, json::error_code&) {
        --depth;
        return true;
    }
    bool on_key_part(json::string_view s, std::size_t, json::error_code&) {
        if (key.size() < 64) key.append(s.data(), std::min<std::size_t>(s.size(), 64));
        return true;
    }
    bool on_key(json::string_view s, std::size_t, json::error_code&) {
        if (key.size() < 64) key.append(s.data(), std::min<std::size_t>(s.size(), 64));
        return true;
    }
    bool on_string_part(json::string_view s, std::size_t, json::error_code&) {
        append(std::string_view(s.data(), s.size()));
        return true;
    }
    bool on_string(json::string_view s, std::size_t, json::error_code&) {
        append(std::string_view(s.data(), s.size()));
        key.clear();
        return true;
    }
    bool on_number_part(json::string_view, json::error_code&) { return true; }
    bool on_int64(std::int64_t v, json::string_view, json::error_code&) {
        if (depth == 1 && key == "exit_code") exit_code = v;
        key.clear();
        return true;
    }
    bool on_uint64(std::uint64_t v, json::string_view, json::error_code&) {
        if (depth == 1 && key == "exit_code")
            exit_code = static_cast<std::int64_t>(std::min<std::uint64_t>(v, INT64_MAX));
        key.clear();
        return true;
    }
    bool on_double(double, json::string_view, json::error_code&) {
        key.clear();
        return true;
    }
    bool on_bool(bool, json::error_code&) {
        key.clear();
        return true;
    }
    bool on_null(json::error_code&) {
        key.clear();
        return true;
    }
    bool on_comment_part(json::string_view, json::error_code&) { return true; }
    bool on_comment(json::string_view, json::error_code&) { return true; }
};

struct ExecuteResponseReader::State {
    explicit State(std::size_t cap) : parser(json::parse_options{}) { parser.handler().cap = cap; }
    json::basic_parser<ExecuteHandler> parser;
    bool failed = false;
};

ExecuteResponseReader::ExecuteResponseReader(std::size_t cap) : state_(std::make_unique<State>(cap)) {}
ExecuteResponseReader::~ExecuteResponseReader() = default;

void ExecuteResponseReader::expect_body(std::uint64_t bytes) { state_->parser.handler().body_left = bytes; }

bool ExecuteResponseReader::write(std::string_view chunk) {
    if (state_->failed) return false;
    json::error_code ec;
    const std::size_t used = state_->parser.write_some(true, chunk.data(), chunk.size(), ec);
    // write_some stops where the document ends: anything after it but whitespace is malformed,
    // wherever the pieces happen to end.
    if (ec || chunk.substr(used).find_first_not_of(" \t\r\n") != std::string_view::npos) state_->failed = true;
    auto& left = state_->parser.handler().body_left;
    if (left) *left -= std::min<std::uint64_t>(*left, chunk.size());
    return !state_->failed;
}

bool ExecuteResponseReader::finish() {
    if (state_->failed) return false;
    json::error_code ec;
    state_->parser.write_some(false, nullptr, 0, ec);
    if (ec || !state_->parser.done() || !state_->parser.handler().top_is_object) state_->failed = true;
    return !state_->failed;
}

std::string& ExecuteResponseReader::stdout_text() { return state_->parser.handler().out; }
std::string& ExecuteResponseReader::stderr_text() { return state_->parser.handler().err; }
std::string& ExecuteResponseReader::stderr_tail() { return state_->parser.handler().err_tail; }
std::optional<std::int64_t> ExecuteResponseReader::exit_code() const { return state_->parser.handler().exit_code; }
bool ExecuteResponseReader::truncated() const { return state_->parser.handler().truncated; }

namespace {

// Base64 that may be cut anywhere (a capped stream), decoded where it lies: line breaks
// skipped, a partial last group dropped. false when something else than base64 is in it.
bool decode_prefix(std::string& text) { return proto::base64_decode_whole_groups_in_place(text); }

}  // namespace

DecodedRun decode_run(std::string stdout_text, std::string stderr_text, std::string_view stderr_tail, bool truncated,
                      std::string_view marker) {
    DecodedRun r;
    r.truncated = truncated;
    // The trailer is the last line of stderr; the line break before it is the wrapper's own.
    std::string_view line;
    if (stderr_tail.size() >= 2 && stderr_tail.back() == '\n') {
        auto nl = stderr_tail.rfind('\n', stderr_tail.size() - 2);
        if (nl != std::string_view::npos) line = stderr_tail.substr(nl + 1, stderr_tail.size() - nl - 2);
    }
    // "<marker>-timeout" and "<marker>-base64 N", compared in place.
    const bool marked = !marker.empty() && line.substr(0, marker.size()) == marker;
    const std::string_view after_marker = marked ? line.substr(marker.size()) : std::string_view();
    if (marked && after_marker == "-timeout") {
        r.timed_out = true;
        return r;
    }
    constexpr std::string_view base64_suffix = "-base64 ";
    if (marked && after_marker.substr(0, base64_suffix.size()) == base64_suffix) {
        std::string_view status = after_marker.substr(base64_suffix.size());
        std::int64_t code = 0;
        bool digits = !status.empty() && status.size() < 10;
        for (char c : status) {
            if (c < '0' || c > '9') {
                digits = false;
            } else {
                code = code * 10 + (c - '0');
            }
        }
        r.exit_code = digits ? std::optional<std::int64_t>(code) : std::nullopt;
        // The trailer (whole, or what the cap left of it, even a few letters of the marker that
        // would read as base64) is not part of the output: base64 writes no empty line, and the
        // trailer starts with one (or at the very start, when the command wrote no stderr).
        if (!stderr_text.empty() && stderr_text.front() == '\n') {
            stderr_text.clear();
        } else if (auto cut = stderr_text.find("\n\n"); cut != std::string::npos) {
            stderr_text.resize(cut);
        }
        if (!decode_prefix(stdout_text) || !decode_prefix(stderr_text)) {
            r.malformed = true;
            return r;
        }
        r.stdout_bytes = std::move(stdout_text);
        r.stderr_bytes = std::move(stderr_text);
        return r;
    }
    r.plain = true;
    r.stdout_bytes = std::move(stdout_text);
    r.stderr_bytes = std::move(stderr_text);
    return r;
}

ComposedOutput compose_output(std::string stdout_text, std::string stderr_text, bool truncated, std::size_t cap) {
    ComposedOutput r;
    r.output = std::move(stdout_text);
    if (!r.output.empty() && !stderr_text.empty()) r.output += '\n';
    r.output += stderr_text;
    r.truncated = truncated || r.output.size() > cap;
    if (r.output.size() > cap) {
        r.output.resize(cap);
        // Cut on a character boundary when the text is UTF-8; bytes stay bytes otherwise.
        std::size_t lead = cap;
        for (int back = 0; lead > 0 && back < 4; ++back) {
            --lead;
            const unsigned char c = static_cast<unsigned char>(r.output[lead]);
            if ((c & 0xC0) != 0x80) {
                const std::size_t need = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
                if (lead + need > cap) r.output.resize(lead);
                break;
            }
        }
    }
    return r;
}

std::string runtime_failure(std::string_view stderr_text, std::int64_t exit_code) {
    constexpr std::string_view prefix = "Failed to execute command: ";
    if (exit_code != 1 || stderr_text.substr(0, prefix.size()) != prefix) return {};
    return std::string(stderr_text.substr(prefix.size()));
}

std::optional<std::int64_t> runtime_timeout_seconds(std::string_view failure) {
    constexpr std::string_view after = "' timed out after ";
    auto at = failure.rfind(after);
    if (at == std::string_view::npos || failure.substr(0, 9) != "Command '") return std::nullopt;
    std::string_view rest = failure.substr(at + after.size());
    std::int64_t seconds = 0;
    std::size_t i = 0;
    while (i < rest.size() && rest[i] >= '0' && rest[i] <= '9' && seconds < 1'000'000'000) {
        seconds = seconds * 10 + (rest[i] - '0');
        ++i;
    }
    if (i == 0 || rest.size() < 8 || rest.substr(rest.size() - 8) != " seconds") return std::nullopt;
    return seconds;
}

}  // namespace kubesandbox::runtime_protocol
