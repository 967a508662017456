// libFuzzer target: the client side of the python-runtime protocol (sandbox/runtime_protocol.hpp):
// the streaming reader of /execute responses, the decoding of what execute_argv's wrapper
// writes, compose_output and the readers of the runtime's own failure reports. Input layout:
// byte 0 seeds the split of every byte stream into write() calls, byte 1 the caps (7 bytes a
// step), byte 2 an exit code, byte 3 flags (the wrapper's timeout trailer; JSON written by hand:
// extra members, '/' as "\/", "\u000a" for newlines, whitespace), bytes 4-7 the random part of
// the marker and a timeout in seconds, bytes 8-9 where the rest splits into stdout and stderr.
// The rest is fed (a) raw as a response body, (b) as the bytes a command wrote, wrapped the way
// the wrapper and the runtime do (base64 with 76 columns, the "<marker>-base64 N" trailer, the
// runtime's JSON), and (c) as the command in the runtime's "timed out" report. Properties, each
// checked with std::abort(): nothing throws (malformed JSON is a false from write()/finish());
// how the bytes are split changes nothing; a stream keeps at most `cap` bytes, exactly the first
// ones, and truncated() says whether any were dropped; stderr_tail() is a suffix of stderr of at
// least min(512, size) and at most 1024 bytes; compose_output never exceeds its cap and cuts the
// full text at most 3 bytes short of it (a UTF-8 boundary); wrapped output comes back exactly
// (stdout, stderr, exit code, timeout), and under the caps execute() uses, the composed output is
// what composing the original streams gives; the runtime's timeout report gives back its seconds.
#include "files/text.hpp"
#include "proto/kubeconfig.hpp"
#include "sandbox/runtime_protocol.hpp"

#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

namespace rp = kubesandbox::runtime_protocol;

constexpr std::size_t unlimited = std::numeric_limits<std::size_t>::max();

struct Rng {
    std::uint64_t s;
    std::size_t next(std::size_t n) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        return n == 0 ? 0 : static_cast<std::size_t>(s % n);
    }
};

struct Read {
    bool ok = false;
    std::string out, err, tail;
    std::optional<std::int64_t> exit_code;
    bool truncated = false;
};

// Feeds `body` in pieces of at most `max_piece` bytes (0: whole), as ExecuteSink does.
Read read(std::string_view body, std::size_t cap, Rng rng, std::size_t max_piece) {
    rp::ExecuteResponseReader reader(cap);
    bool ok = true;
    for (std::size_t at = 0; at < body.size() && ok;) {
        const std::size_t n = max_piece == 0 ? body.size() : std::min(body.size() - at, 1 + rng.next(max_piece));
        ok = reader.write(body.substr(at, n));
        at += n;
    }
    if (ok) ok = reader.finish();
    if (!ok && (reader.write("{}") || reader.finish())) std::abort();  // a failed reader stays failed
    Read r{
        ok, reader.stdout_text(), reader.stderr_text(), reader.stderr_tail(), reader.exit_code(), reader.truncated()};
    if (r.out.size() > cap || r.err.size() > cap || r.tail.size() > 1024) std::abort();
    return r;
}

bool is_suffix(std::string_view whole, std::string_view end) {
    return end.size() <= whole.size() && whole.substr(whole.size() - end.size()) == end;
}

// `capped` is what a reader with `cap` keeps of what an unlimited one (`full`) kept.
void check_capped(const Read& full, const Read& capped, std::size_t cap) {
    if (full.ok != capped.ok || full.truncated) std::abort();
    if (!full.ok) return;  // what was kept before the error may depend on where the pieces end
    if (full.exit_code != capped.exit_code) std::abort();
    if (capped.out != full.out.substr(0, cap) || capped.err != full.err.substr(0, cap)) std::abort();
    if (capped.truncated != (full.out.size() > cap || full.err.size() > cap)) std::abort();
    for (const Read* r : {&full, &capped}) {
        if (!is_suffix(full.err, r->tail) || r->tail.size() < std::min<std::size_t>(full.err.size(), 512)) std::abort();
    }
}

void check_composed(const std::string& out, const std::string& err, bool truncated, std::size_t cap) {
    const std::string full = out.empty() || err.empty() ? out + err : out + "\n" + err;
    const auto c = rp::compose_output(out, err, truncated, cap);
    if (c.output.size() > cap || full.compare(0, c.output.size(), c.output) != 0) std::abort();
    if (c.output.size() + 3 < std::min(full.size(), cap)) std::abort();
    if (c.truncated != (truncated || full.size() > cap)) std::abort();
    if (kubesandbox::files::valid_utf8(full) && !kubesandbox::files::valid_utf8(c.output)) std::abort();
}

// What coreutils' and busybox's base64 print: 76 columns, a line break after the last line.
std::string wrapped_base64(std::string_view bytes) {
    const std::string b = kubesandbox::proto::base64_encode(bytes);
    std::string out;
    for (std::size_t at = 0; at < b.size(); at += 76) out.append(b, at, 76).append("\n");
    return out;
}

struct Style {
    bool hand_written = false, extras = false, escape_slash = false, unicode_newline = false, spaces = false;
};

std::string json_string(std::string_view s, const Style& style) {
    static const char* hex = "0123456789abcdef";
    std::string out = "\"";
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c == '/' && style.escape_slash) {
            out += "\\/";
        } else if (c == '\n' && !style.unicode_newline) {
            out += "\\n";
        } else if (c < 0x20) {
            out += "\\u00";
            out += hex[c >> 4];
            out += hex[c & 15];
        } else {
            out += static_cast<char>(c);
        }
    }
    return out + "\"";
}

// The runtime's {"stdout","stderr","exit_code"}: as runtime_core's execute_body writes it, or by
// hand in another member order, with other members around them and other escapes.
std::string execute_json(const std::string& out, const std::string& err, std::int64_t code, const Style& style,
                         Rng& rng) {
    if (!style.hand_written)
        return boost::json::serialize(boost::json::object{{"stdout", out}, {"stderr", err}, {"exit_code", code}});
    std::vector<std::string> members = {"\"stdout\":" + json_string(out, style),
                                        "\"stderr\":" + json_string(err, style),
                                        "\"exit_code\":" + std::to_string(code)};
    if (style.extras) {
        static const char* extras[] = {
            R"("extra":{})",
            R"("list":[])",
            R"("nested":{"stdout":"zz","stderr":"yy","exit_code":7,"deeper":[{},[]]})",
            R"("n":null)",
            R"("t":true)",
            R"("d":1.5e3)",
            R"("s":"str")",
            R"("big":18446744073709551615)",
            R"("arr":[{"stdout":"x"},"stderr",3])",
            R"("":"")",
        };
        for (std::size_t i = 0, n = 1 + rng.next(4); i < n; ++i)
            members.insert(members.begin() + static_cast<std::ptrdiff_t>(rng.next(members.size() + 1)),
                           extras[rng.next(std::size(extras))]);
    }
    for (std::size_t i = members.size(); i > 1; --i) std::swap(members[i - 1], members[rng.next(i)]);
    const char* gaps[] = {"", " ", "\n", "\t ", "\r\n  "};
    auto gap = [&] { return style.spaces ? std::string(gaps[rng.next(std::size(gaps))]) : std::string(); };
    std::string body = gap() + "{";
    for (std::size_t i = 0; i < members.size(); ++i) body += (i ? "," : "") + gap() + members[i] + gap();
    return body + "}" + gap();
}

// (b) What the command wrote, through execute_argv's wrapper and the runtime, and back.
void check_round_trip(std::string_view stdout_bytes, std::string_view stderr_bytes, unsigned code, bool timed_out,
                      const std::string& marker, std::size_t cap, const Style& style, Rng rng, std::size_t max_piece) {
    const std::string out = wrapped_base64(stdout_bytes);
    std::string err = wrapped_base64(stderr_bytes);
    err += timed_out ? "\n" + marker + "-timeout\n" : "\n" + marker + "-base64 " + std::to_string(code) + "\n";
    const std::int64_t runtime_code = timed_out ? -9 : code;  // SIGKILL, as Python reports it
    const std::string body = execute_json(out, err, runtime_code, style, rng);

    // The cap execute() gives the reader for an output cap.
    const std::size_t encoded_cap = cap / 3 * 4 + cap / 57 + 256;
    const Read r = read(body, encoded_cap, rng, max_piece);
    if (!r.ok || r.exit_code != runtime_code) std::abort();
    if (r.out != out.substr(0, encoded_cap) || r.err != err.substr(0, encoded_cap)) std::abort();
    if (r.truncated != (out.size() > encoded_cap || err.size() > encoded_cap)) std::abort();
    if (!is_suffix(err, r.tail) || r.tail.size() < std::min<std::size_t>(err.size(), 512)) std::abort();
    const bool within_cap = stdout_bytes.size() <= cap && stderr_bytes.size() <= cap;
    if (within_cap && r.truncated) std::abort();  // the encoded cap leaves room for the trailer

    auto d = rp::decode_run(r.out, r.err, r.tail, r.truncated, marker);
    if (d.plain || d.malformed || d.timed_out != timed_out) std::abort();
    if (timed_out) {
        if (!d.stdout_bytes.empty() || !d.stderr_bytes.empty()) std::abort();
        return;
    }
    if (d.exit_code != std::optional<std::int64_t>(code)) std::abort();
    if (!r.truncated && (d.stdout_bytes != stdout_bytes || d.stderr_bytes != stderr_bytes)) std::abort();
    if (stdout_bytes.substr(0, d.stdout_bytes.size()) != d.stdout_bytes) std::abort();
    // What execute() returns: as if the original streams had been composed under the cap.
    const auto expected = rp::compose_output(std::string(stdout_bytes), std::string(stderr_bytes), false, cap);
    const auto got = rp::compose_output(std::move(d.stdout_bytes), std::move(d.stderr_bytes), d.truncated, cap);
    if (got.output != expected.output || got.truncated != expected.truncated) std::abort();
}

// (c) The runtime's report of its own timeout, with the command's words from the input.
void check_runtime_timeout(std::string_view words, std::int64_t seconds, bool fraction, Rng rng,
                           std::size_t max_piece) {
    const std::string failure = "Command '['sh', '-c', '" + kubesandbox::files::replace_invalid_utf8(words) +
                                "']' timed out after " + std::to_string(seconds) + (fraction ? ".5" : ".0") +
                                " seconds";
    const std::string body = boost::json::serialize(
        boost::json::object{{"stdout", ""}, {"stderr", "Failed to execute command: " + failure}, {"exit_code", 1}});
    const Read r = read(body, unlimited, rng, max_piece);
    if (!r.ok || r.exit_code != 1 || r.truncated) std::abort();
    if (rp::runtime_failure(r.err, 2) != "" || rp::runtime_failure(r.err, 1) != failure) std::abort();
    if (rp::runtime_timeout_seconds(failure) != std::optional<std::int64_t>(seconds)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 10) return 0;
    const std::size_t max_piece = std::size_t(1) << ((data[0] & 7) * 2);  // 1 .. 16384
    const Rng rng{0x9E3779B97F4A7C15ULL ^ (std::uint64_t(data[0]) << 40 | std::uint64_t(data[4]) << 8 | data[5] | 1)};
    const std::size_t cap = std::size_t(data[1]) * 7;
    const unsigned code = data[2];
    const std::uint8_t flags = data[3];
    const std::uint32_t random =
        std::uint32_t(data[4]) << 24 | std::uint32_t(data[5]) << 16 | std::uint32_t(data[6]) << 8 | data[7];
    std::string marker = "kubesandbox-timeout-";
    for (int shift = 28; shift >= 0; shift -= 4) marker += "0123456789abcdef"[(random >> shift) & 15];
    const std::string_view in(reinterpret_cast<const char*>(data + 10), size - 10);
    const std::size_t split = (std::size_t(data[8]) << 8 | data[9]) % (in.size() + 1);

    try {
        // (a) Raw bytes as a response body.
        const Read full = read(in, unlimited, rng, 0);
        const Read capped = read(in, cap, rng, max_piece);
        check_capped(full, capped, cap);
        if (full.ok && full.out.size() + full.err.size() > in.size()) std::abort();
        auto d = rp::decode_run(capped.out, capped.err, capped.tail, capped.truncated, marker);
        if (d.timed_out && (d.plain || d.malformed || !d.stdout_bytes.empty() || !d.stderr_bytes.empty())) std::abort();
        if (d.plain && (d.stdout_bytes != capped.out || d.stderr_bytes != capped.err || d.malformed)) std::abort();
        if (d.exit_code && (*d.exit_code < 0 || *d.exit_code >= 1'000'000'000)) std::abort();
        if (d.stdout_bytes.size() > capped.out.size() || d.stderr_bytes.size() > capped.err.size()) std::abort();
        if (d.truncated != capped.truncated) std::abort();
        check_composed(d.stdout_bytes, d.stderr_bytes, d.truncated, cap);
        check_composed(std::string(in.substr(0, split)), std::string(in.substr(split)), false, cap);
        const std::string failure = rp::runtime_failure(in, 1);
        if (!failure.empty() && "Failed to execute command: " + failure != in) std::abort();
        if (!rp::runtime_failure(in, 0).empty()) std::abort();
        if (auto seconds = rp::runtime_timeout_seconds(in); seconds && *seconds < 0) std::abort();

        // (b) The rest as what a command wrote.
        Style style;
        style.hand_written = (flags & 2) != 0;
        style.extras = (flags & 4) != 0;
        style.escape_slash = (flags & 8) != 0;
        style.unicode_newline = (flags & 16) != 0;
        style.spaces = (flags & 32) != 0;
        check_round_trip(in.substr(0, split), in.substr(split), code, (flags & 1) != 0, marker, cap, style, rng,
                         max_piece);

        // (c) The rest as the command the runtime timed out.
        check_runtime_timeout(in.substr(0, 256), random % 1'000'000'000, (flags & 64) != 0, rng, max_piece);
    } catch (...) {
        std::abort();  // nothing here may throw
    }
    return 0;
}
