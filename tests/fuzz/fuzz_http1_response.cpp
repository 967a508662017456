// libFuzzer target: the router connection's HTTP/1.1 codec (connection/http1.hpp). Input layout:
// byte 0 seeds the split of every byte stream into put() calls, byte 1 is how many body bytes
// the sink takes before it refuses (255: all), bytes 2-3 a status; the rest is fed (a) raw as a
// response, whole and in pieces, (b) as the body of a Content-Length, a chunked and a
// close-delimited response built here (and a Content-Length head read as the answer to HEAD),
// and (c) split at NUL bytes into the method, target, host, token and header names and values of
// a request for request_head. Properties, each checked with std::abort(): nothing throws; the
// sink sees the head at most once and before any body, never more body bytes than were fed and
// nothing after refusing; how the bytes are split changes nothing; a finished message is consumed
// exactly to its end (what follows belongs to the next response on the connection); a built
// response gives back its status, content type and body exactly (a prefix of at most the sink's
// limit when the sink refuses); a request head is empty exactly when a field holds CR or LF (or
// the method or target a space, or a header name ':' or nothing), and otherwise is the request
// line, one "name: value" line per expected field and nothing else, ending in "\r\n\r\n".
#include "connection/http1.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

namespace ks = kubesandbox;
namespace http = boost::beast::http;

// Split points and chunk sizes derived from the input (xorshift).
struct Rng {
    std::uint64_t s;
    std::size_t next(std::size_t n) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        return n == 0 ? 0 : static_cast<std::size_t>(s % n);
    }
};

class RecordingSink final : public ks::ResponseSink {
public:
    explicit RecordingSink(std::size_t limit) : limit(limit) {}
    void on_head(unsigned s, std::string_view ct) override {
        if (heads++ != 0 || refused) std::abort();
        status = s;
        content_type.assign(ct);
    }
    bool on_body(std::string_view chunk) override {
        if (heads != 1 || refused) std::abort();  // a body before the head, or after refusing
        if (chunk.size() > limit - body.size()) {
            refused = true;
            return false;
        }
        body.append(chunk);
        return true;
    }

    std::size_t limit;
    int heads = 0;
    unsigned status = 0;
    std::string content_type;
    std::string body;
    bool refused = false;
};

enum class End { done, refused, garbled, cut_short };

struct Outcome {
    End end = End::cut_short;
    std::size_t consumed = 0;  // bytes the parser took
    unsigned status = 0;
    bool keep_alive = false;
};

// What PooledRouterConnection::receive does with a connection delivering `in` in pieces of at
// most `max_piece` bytes (max_piece 0: all at once) and then closing.
Outcome receive(ks::ResponseSink& sink, std::string_view in, Rng rng, std::size_t max_piece, bool head_only) {
    ks::http1::ResponseParser parser(sink);
    parser.eager(true);
    parser.body_limit(boost::none);
    parser.header_limit(64 * 1024);
    if (head_only) parser.skip(true);
    std::string buffer;
    std::size_t at = 0;
    Outcome r;
    for (;;) {
        if (!buffer.empty()) {
            boost::system::error_code ec;
            const std::size_t used = parser.put(boost::asio::buffer(buffer), ec);
            if (used > buffer.size()) std::abort();
            buffer.erase(0, used);
            r.consumed += used;
            if (parser.refused_by_sink()) {
                r.end = End::refused;
                return r;
            }
            if (ec && ec != http::error::need_more) {
                r.end = End::garbled;
                return r;
            }
            if (parser.is_done()) {
                r.end = End::done;
                r.status = parser.status();
                r.keep_alive = parser.keep_alive();
                return r;
            }
            if (!ec && used != 0) continue;
        }
        if (at == in.size()) {  // the connection closes
            if (parser.got_some() && parser.need_eof()) {
                boost::system::error_code ec;
                parser.put_eof(ec);
                if (!ec) {
                    if (!parser.is_done() || parser.refused_by_sink()) std::abort();
                    r.end = End::done;
                    r.status = parser.status();
                    return r;
                }
            }
            r.end = End::cut_short;
            return r;
        }
        std::size_t n = max_piece == 0 ? in.size() - at : std::min(in.size() - at, 1 + rng.next(max_piece));
        buffer.append(in.substr(at, n));
        at += n;
    }
}

void check_sink(const RecordingSink& sink, const Outcome& r, std::size_t fed) {
    if (sink.heads > 1 || sink.body.size() > r.consumed || r.consumed > fed) std::abort();
    if (sink.body.size() > sink.limit) std::abort();
    if ((r.end == End::refused) != sink.refused) std::abort();
    if (!sink.body.empty() && sink.heads != 1) std::abort();
    if (r.end == End::done) {
        if (sink.heads != 1 || r.status != sink.status || r.status > 999) std::abort();
    }
}

std::string hex(std::size_t n, bool upper) {
    const char* digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
    std::string s;
    do {
        s.insert(s.begin(), digits[n % 16]);
        n /= 16;
    } while (n != 0);
    return s;
}

enum class Framing { content_length, chunked, close };

std::string build_response(Framing framing, unsigned status, std::string_view body, Rng& rng) {
    std::string m = "HTTP/1.1 " + std::to_string(status) + " Whatever\r\nContent-Type: application/json\r\n";
    switch (framing) {
        case Framing::content_length:
            m += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
            m += body;
            break;
        case Framing::chunked: {
            m += "Transfer-Encoding: chunked\r\n\r\n";
            for (std::size_t at = 0; at < body.size();) {
                const std::size_t n = std::min(body.size() - at, 1 + rng.next(300));
                m += hex(n, rng.next(2) != 0);
                if (rng.next(4) == 0) m += ";ext=\"x\"";
                m += "\r\n";
                m += body.substr(at, n);
                m += "\r\n";
                at += n;
            }
            m += "0\r\n";
            if (rng.next(2) != 0) m += "X-Trailer: t\r\n";
            m += "\r\n";
            break;
        }
        case Framing::close:
            m += "Connection: close\r\n\r\n";
            m += body;
            break;
    }
    return m;
}

void check_built(Framing framing, unsigned status, std::string_view body, std::size_t limit, Rng& rng,
                 std::size_t max_piece) {
    const std::string message = build_response(framing, status, body, rng);
    // The start of the next response on a kept-alive connection is not this one's.
    const std::string next = framing == Framing::close ? "" : "HTTP/1.1 204 No Content\r\n\r\n";
    const std::string in = message + next;
    RecordingSink sink(limit);
    const Outcome r = receive(sink, in, rng, max_piece, false);
    check_sink(sink, r, in.size());
    if (sink.heads != 1 || sink.status != status || sink.content_type != "application/json") std::abort();
    if (body.size() > limit) {
        if (r.end != End::refused || sink.body.size() > limit || body.substr(0, sink.body.size()) != sink.body)
            std::abort();
        return;
    }
    if (r.end != End::done || r.status != status || sink.body != body || r.consumed != message.size()) std::abort();
    if (r.keep_alive != (framing != Framing::close)) std::abort();
}

void check_head_only(unsigned status, std::size_t length, Rng& rng, std::size_t max_piece) {
    const std::string head = "HTTP/1.1 " + std::to_string(status) + " OK\r\nContent-Length: " + std::to_string(length) +
                             "\r\nContent-Type: text/plain\r\n\r\n";
    RecordingSink sink(0);
    const Outcome r = receive(sink, head + "HTTP/1.1 200 OK\r\n", rng, max_piece, true);
    check_sink(sink, r, head.size());
    if (r.end != End::done || r.consumed != head.size() || !sink.body.empty() || sink.content_type != "text/plain")
        std::abort();
}

bool has_line_break(std::string_view s) { return s.find_first_of("\r\n") != std::string_view::npos; }

void check_request_head(std::string_view fields, bool with_body, bool with_prefix) {
    std::vector<std::string> parts;
    for (std::size_t start = 0;;) {
        const std::size_t nul = fields.find('\0', start);
        parts.emplace_back(fields.substr(start, nul == std::string_view::npos ? std::string_view::npos : nul - start));
        if (nul == std::string_view::npos) break;
        start = nul + 1;
    }
    parts.resize(std::max<std::size_t>(parts.size(), 4));
    ks::RouterRequest request;
    request.method = parts[0].empty() ? "GET" : parts[0];
    request.target = parts[1];
    const std::string& host = parts[2];
    const std::string& token = parts[3];
    std::vector<std::pair<std::string, std::string>> headers;
    for (std::size_t i = 4; i < parts.size(); i += 2)
        headers.emplace_back(parts[i], i + 1 < parts.size() ? parts[i + 1] : std::string());
    for (const auto& [name, value] : headers) request.add_header(name, value);
    if (with_body) request.body = "{}";
    // A prefix is the encoded path of a parsed URL: no CR, LF or space can be in it.
    const std::string prefix = with_prefix ? "/api/v1/namespaces/default/services/sandbox-router-svc:8080/proxy" : "";

    bool refuse = has_line_break(request.method) || has_line_break(request.target) || has_line_break(host) ||
                  has_line_break(token) || request.method.find(' ') != std::string::npos ||
                  request.target.find(' ') != std::string::npos;
    for (const auto& [name, value] : headers)
        if (name.empty() || has_line_break(name) || has_line_break(value) || name.find(':') != std::string::npos)
            refuse = true;

    const std::string head = ks::http1::request_head(request, prefix, host, token);
    if (refuse) {
        if (!head.empty()) std::abort();
        return;
    }
    if (head.size() < 4 || head.compare(head.size() - 4, 4, "\r\n\r\n") != 0) std::abort();

    std::vector<std::pair<std::string, std::string>> expected = {{"Host", host}, {"User-Agent", "kubesandbox"}};
    if (!token.empty()) expected.emplace_back("Authorization", "Bearer " + token);
    for (const auto& h : headers) expected.push_back(h);
    if (with_body || request.method == "POST" || request.method == "PUT" || request.method == "PATCH")
        expected.emplace_back("Content-Length", std::to_string(request.body.size()));

    // Lines end in CRLF; no other CR or LF anywhere.
    std::vector<std::string_view> lines;
    std::string_view rest(head);
    rest.remove_suffix(2);  // the blank line's CRLF
    while (!rest.empty()) {
        const std::size_t crlf = rest.find("\r\n");
        if (crlf == std::string_view::npos) std::abort();
        const std::string_view line = rest.substr(0, crlf);
        if (has_line_break(line)) std::abort();
        lines.push_back(line);
        rest.remove_prefix(crlf + 2);
    }
    if (lines.size() != 1 + expected.size()) std::abort();
    if (lines[0] != request.method + " " + prefix + request.target + " HTTP/1.1") std::abort();
    for (std::size_t i = 0; i < expected.size(); ++i) {
        const std::string_view line = lines[i + 1];
        const std::size_t colon = line.find(':');
        if (colon == 0 || colon == std::string_view::npos || line.substr(colon, 2) != ": ") std::abort();
        if (line.substr(0, colon) != expected[i].first || line.substr(colon + 2) != expected[i].second) std::abort();
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 4) return 0;
    const std::size_t max_piece = std::size_t(1) << ((data[0] & 7) * 2);  // 1 .. 16384
    const Rng rng{0x9E3779B97F4A7C15ULL ^ (std::uint64_t(data[0]) << 32 | std::uint64_t(data[2]) << 8 | data[3] | 1)};
    const std::size_t limit = data[1] == 255 ? std::numeric_limits<std::size_t>::max() : std::size_t(data[1]) * 16;
    unsigned status = 200 + (static_cast<unsigned>(data[2]) << 8 | data[3]) % 400;
    if (status == 204 || status == 304) status = 200;  // no body there
    const std::string_view in(reinterpret_cast<const char*>(data + 4), size - 4);

    try {
        // (a) Raw bytes, whole and in pieces: the same outcome however the bytes arrive.
        RecordingSink whole_sink(limit);
        const Outcome whole = receive(whole_sink, in, rng, 0, false);
        check_sink(whole_sink, whole, in.size());
        RecordingSink piece_sink(limit);
        const Outcome pieces = receive(piece_sink, in, rng, max_piece, false);
        check_sink(piece_sink, pieces, in.size());
        // (Beast may reject a bad start line at once when it comes whole, but wait for the end of
        // the header when it comes in pieces: both are failures, told apart by nobody.)
        auto failed = [](End e) { return e == End::garbled || e == End::cut_short; };
        if ((whole.end != pieces.end && !(failed(whole.end) && failed(pieces.end))) ||
            whole_sink.heads != piece_sink.heads)
            std::abort();
        if (whole.end != End::refused && whole_sink.body != piece_sink.body) std::abort();
        if (whole.end == End::done && (whole.consumed != pieces.consumed || whole.status != pieces.status ||
                                       whole.keep_alive != pieces.keep_alive))
            std::abort();
        RecordingSink head_sink(limit);
        const Outcome head_only = receive(head_sink, in, rng, max_piece, true);
        check_sink(head_sink, head_only, in.size());
        if (!head_sink.body.empty()) std::abort();

        // (b) The rest as a body, framed three ways.
        Rng r = rng;
        check_built(Framing::content_length, status, in, limit, r, max_piece);
        check_built(Framing::chunked, status, in, limit, r, max_piece);
        check_built(Framing::close, status, in, limit, r, max_piece);
        check_head_only(status, in.size(), r, max_piece);

        // (c) The rest as request fields.
        check_request_head(in, (data[1] & 1) != 0, (data[1] & 2) != 0);
    } catch (...) {
        std::abort();  // nothing here may throw
    }
    return 0;
}
