#include "local/spdy.hpp"

#include <unordered_set>

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstring>

namespace kubesandbox::local::spdy {

namespace {

// Built from the SPDY/3 draft (section 2.6.10.1): 65 length-prefixed words, then a raw tail.
std::string build_dictionary() {
    static constexpr std::array<std::string_view, 65> words = {"options",
                                                               "head",
                                                               "post",
                                                               "put",
                                                               "delete",
                                                               "trace",
                                                               "accept",
                                                               "accept-charset",
                                                               "accept-encoding",
                                                               "accept-language",
                                                               "accept-ranges",
                                                               "age",
                                                               "allow",
                                                               "authorization",
                                                               "cache-control",
                                                               "connection",
                                                               "content-base",
                                                               "content-encoding",
                                                               "content-language",
                                                               "content-length",
                                                               "content-location",
                                                               "content-md5",
                                                               "content-range",
                                                               "content-type",
                                                               "date",
                                                               "etag",
                                                               "expect",
                                                               "expires",
                                                               "from",
                                                               "host",
                                                               "if-match",
                                                               "if-modified-since",
                                                               "if-none-match",
                                                               "if-range",
                                                               "if-unmodified-since",
                                                               "last-modified",
                                                               "location",
                                                               "max-forwards",
                                                               "pragma",
                                                               "proxy-authenticate",
                                                               "proxy-authorization",
                                                               "range",
                                                               "referer",
                                                               "retry-after",
                                                               "server",
                                                               "te",
                                                               "trailer",
                                                               "transfer-encoding",
                                                               "upgrade",
                                                               "user-agent",
                                                               "vary",
                                                               "via",
                                                               "warning",
                                                               "www-authenticate",
                                                               "method",
                                                               "get",
                                                               "status",
                                                               "200 OK",
                                                               "version",
                                                               "HTTP/1.1",
                                                               "url",
                                                               "public",
                                                               "set-cookie",
                                                               "keep-alive",
                                                               "origin"};
    static constexpr std::string_view tail =
        "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
        "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request"
        "401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented"
        "503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 "
        "Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,image/gif,"
        "application/xml,application/xhtml+xml,text/plain,text/javascript,publicprivatemax-age="
        "gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.";
    std::string out;
    for (auto w : words) {
        auto n = static_cast<std::uint32_t>(w.size());
        out.push_back(static_cast<char>(n >> 24));
        out.push_back(static_cast<char>(n >> 16));
        out.push_back(static_cast<char>(n >> 8));
        out.push_back(static_cast<char>(n));
        out.append(w);
    }
    out.append(tail);
    return out;
}

constexpr std::size_t max_header_block = 1 << 20;  // decompressed; guards against zlib bombs

void put32(std::string& out, std::uint32_t v) {
    out.push_back(static_cast<char>(v >> 24));
    out.push_back(static_cast<char>(v >> 16));
    out.push_back(static_cast<char>(v >> 8));
    out.push_back(static_cast<char>(v));
}

std::uint32_t get32(std::string_view s, std::size_t at) {
    auto b = [&](std::size_t i) { return static_cast<std::uint32_t>(static_cast<unsigned char>(s[at + i])); };
    return (b(0) << 24) | (b(1) << 16) | (b(2) << 8) | b(3);
}

std::string control_header(FrameType type, std::uint8_t flags, std::size_t length) {
    std::string out;
    out.reserve(8 + length);
    out.push_back(static_cast<char>(0x80));
    out.push_back(static_cast<char>(version));
    auto t = static_cast<std::uint16_t>(type);
    out.push_back(static_cast<char>(t >> 8));
    out.push_back(static_cast<char>(t));
    put32(out, (static_cast<std::uint32_t>(flags) << 24) | static_cast<std::uint32_t>(length));
    return out;
}

tl::unexpected<Error> malformed(std::string message) {
    return fail(errc::invalid_response, "SPDY: " + std::move(message));
}

}  // namespace

std::string_view dictionary() {
    static const std::string dict = build_dictionary();
    return dict;
}

std::optional<std::string_view> find_header(const HeaderBlock& headers, std::string_view name) {
    for (const auto& [n, v] : headers)
        if (n == name) return std::string_view(v);
    return std::nullopt;
}

std::string encode_header_block(const HeaderBlock& headers) {
    std::string out;
    put32(out, static_cast<std::uint32_t>(headers.size()));
    for (const auto& [name, value] : headers) {
        put32(out, static_cast<std::uint32_t>(name.size()));
        out.append(name);
        put32(out, static_cast<std::uint32_t>(value.size()));
        out.append(value);
    }
    return out;
}

Result<HeaderBlock> decode_header_block(std::string_view block) {
    if (block.size() < 4) return malformed("header block shorter than its pair count");
    std::uint32_t count = get32(block, 0);
    std::size_t at = 4;
    // Each pair needs at least 8 bytes; this bounds the reservation by the input size.
    if (count > (block.size() - at) / 8) return malformed("header block pair count exceeds its length");
    HeaderBlock out;
    out.reserve(count);
    // Names seen so far, as views into `block`: a hash lookup each, not a scan of the pairs.
    std::unordered_set<std::string_view> seen;
    seen.reserve(count);
    auto read_string = [&](std::string_view& dst) -> bool {
        if (block.size() - at < 4) return false;
        std::uint32_t n = get32(block, at);
        at += 4;
        if (block.size() - at < n) return false;
        dst = block.substr(at, n);
        at += n;
        return true;
    };
    for (std::uint32_t i = 0; i < count; ++i) {
        std::string_view name, value;
        if (!read_string(name) || !read_string(value)) return malformed("truncated header block");
        if (name.empty()) return malformed("empty header name");
        if (std::any_of(name.begin(), name.end(), [](char c) { return c >= 'A' && c <= 'Z'; }))
            return malformed("uppercase header name \"" + std::string(name) + "\"");
        if (!seen.insert(name).second) return malformed("duplicate header name \"" + std::string(name) + "\"");
        out.emplace_back(std::string(name), std::string(value));
    }
    if (at != block.size()) return malformed("trailing bytes after header block");
    return out;
}

// ---- zlib contexts ----

struct HeaderInflater::State {
    z_stream z{};
    bool ok = false;
    State() { ok = inflateInit(&z) == Z_OK; }
    ~State() {
        if (ok) inflateEnd(&z);
    }
};

HeaderInflater::HeaderInflater() : state_(std::make_unique<State>()) {}
HeaderInflater::~HeaderInflater() = default;
HeaderInflater::HeaderInflater(HeaderInflater&&) noexcept = default;
HeaderInflater& HeaderInflater::operator=(HeaderInflater&&) noexcept = default;

Result<std::string> HeaderInflater::inflate(std::string_view compressed) {
    if (!state_ || !state_->ok) return fail(errc::internal_error, "SPDY: zlib inflate unavailable");
    z_stream& z = state_->z;
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data()));
    z.avail_in = static_cast<uInt>(compressed.size());
    std::string out;
    std::array<char, 4096> chunk;
    while (true) {
        z.next_out = reinterpret_cast<Bytef*>(chunk.data());
        z.avail_out = static_cast<uInt>(chunk.size());
        int rc = ::inflate(&z, Z_SYNC_FLUSH);
        if (rc == Z_NEED_DICT) {
            auto dict = dictionary();
            if (inflateSetDictionary(&z, reinterpret_cast<const Bytef*>(dict.data()), static_cast<uInt>(dict.size())) !=
                Z_OK)
                return malformed("header block uses an unknown zlib dictionary");
            continue;
        }
        out.append(chunk.data(), chunk.size() - z.avail_out);
        if (out.size() > max_header_block) return malformed("header block too large once decompressed");
        if (rc == Z_STREAM_END) return malformed("header compression stream ended");
        if (rc == Z_BUF_ERROR) {
            // No progress possible: fine when all input was consumed and output had room.
            if (z.avail_in == 0) break;
            return malformed("header block decompression stalled");
        }
        if (rc != Z_OK)
            return malformed(std::string("header block decompression failed: ") + (z.msg ? z.msg : "zlib error"));
        if (z.avail_in == 0 && z.avail_out != 0) break;
    }
    return out;
}

struct HeaderDeflater::State {
    z_stream z{};
    bool ok = false;
    State() {
        ok = deflateInit2(&z, Z_BEST_COMPRESSION, Z_DEFLATED, 15, 9, Z_DEFAULT_STRATEGY) == Z_OK;
        if (ok) {
            auto dict = dictionary();
            ok = deflateSetDictionary(&z, reinterpret_cast<const Bytef*>(dict.data()),
                                      static_cast<uInt>(dict.size())) == Z_OK;
        }
    }
    ~State() { deflateEnd(&z); }
};

HeaderDeflater::HeaderDeflater() : state_(std::make_unique<State>()) {}
HeaderDeflater::~HeaderDeflater() = default;
HeaderDeflater::HeaderDeflater(HeaderDeflater&&) noexcept = default;
HeaderDeflater& HeaderDeflater::operator=(HeaderDeflater&&) noexcept = default;

Result<std::string> HeaderDeflater::deflate(std::string_view raw) {
    if (!state_ || !state_->ok) return fail(errc::internal_error, "SPDY: zlib deflate unavailable");
    z_stream& z = state_->z;
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
    z.avail_in = static_cast<uInt>(raw.size());
    std::string out;
    std::array<char, 4096> chunk;
    do {
        z.next_out = reinterpret_cast<Bytef*>(chunk.data());
        z.avail_out = static_cast<uInt>(chunk.size());
        int rc = ::deflate(&z, Z_SYNC_FLUSH);
        if (rc != Z_OK && rc != Z_BUF_ERROR) return fail(errc::internal_error, "SPDY: header compression failed");
        out.append(chunk.data(), chunk.size() - z.avail_out);
    } while (z.avail_out == 0);
    return out;
}

// ---- decoder ----

Decoder::Decoder(std::size_t max_frame_length) : max_frame_length_(max_frame_length) {}

void Decoder::feed(std::string_view bytes) {
    // Compact lazily so that feeding one byte at a time stays linear.
    if (pos_ > 0 && pos_ >= buffer_.size() / 2) {
        buffer_.erase(0, pos_);
        pos_ = 0;
    }
    buffer_.append(bytes);
}

Result<std::optional<Frame>> Decoder::next() {
    if (failed_) return fail(errc::invalid_response, "SPDY: connection already failed");
    std::string_view avail(buffer_.data() + pos_, buffer_.size() - pos_);
    if (avail.size() < 8) return std::optional<Frame>{};
    std::uint32_t word0 = get32(avail, 0);
    std::uint32_t word1 = get32(avail, 4);
    auto flags = static_cast<std::uint8_t>(word1 >> 24);
    std::uint32_t length = word1 & 0xffffff;
    bool control = (word0 & 0x80000000u) != 0;
    auto error = [&](tl::unexpected<Error> e) -> Result<std::optional<Frame>> {
        failed_ = true;
        return e;
    };
    if (control) {
        auto ver = static_cast<std::uint16_t>((word0 >> 16) & 0x7fff);
        if (ver != version) return error(fail(errc::unsupported, "SPDY: unsupported version " + std::to_string(ver)));
    }
    if (length > max_frame_length_)
        return error(fail(errc::request_entity_too_large,
                          "SPDY: frame of " + std::to_string(length) + " bytes exceeds the limit"));
    if (avail.size() < 8 + static_cast<std::size_t>(length)) return std::optional<Frame>{};
    std::string_view payload = avail.substr(8, length);
    Result<Frame> frame;
    if (control) {
        frame = decode_control(static_cast<std::uint16_t>(word0 & 0xffff), flags, payload);
    } else {
        std::uint32_t stream_id = word0 & 0x7fffffff;
        if (stream_id == 0) frame = malformed("DATA frame on stream 0");
        else if ((flags & ~flag_fin) != 0) frame = malformed("DATA frame with unknown flags");
        else frame = DataFrame{stream_id, (flags & flag_fin) != 0, std::string(payload)};
    }
    pos_ += 8 + length;
    if (!frame) return error(tl::unexpected(std::move(frame.error())));
    return std::optional<Frame>(std::move(*frame));
}

Result<HeaderBlock> Decoder::headers_from(std::string_view compressed) {
    // An absent block means no headers; otherwise it must be decompressed even if the frame is
    // later rejected, to keep the connection's zlib stream in step.
    if (compressed.empty()) return HeaderBlock{};
    auto raw = inflater_.inflate(compressed);
    if (!raw) return tl::unexpected(std::move(raw.error()));
    return decode_header_block(*raw);
}

Result<Frame> Decoder::decode_control(std::uint16_t type, std::uint8_t flags, std::string_view p) {
    switch (static_cast<FrameType>(type)) {
        case FrameType::syn_stream: {
            if (p.size() < 10) return malformed("SYN_STREAM shorter than 10 bytes");
            if ((flags & ~(flag_fin | flag_unidirectional)) != 0) return malformed("SYN_STREAM with unknown flags");
            SynStream f;
            f.stream_id = get32(p, 0) & 0x7fffffff;
            f.associated_stream_id = get32(p, 4) & 0x7fffffff;
            f.priority = static_cast<std::uint8_t>(static_cast<unsigned char>(p[8]) >> 5);
            f.slot = static_cast<std::uint8_t>(p[9]);
            f.fin = (flags & flag_fin) != 0;
            f.unidirectional = (flags & flag_unidirectional) != 0;
            auto h = headers_from(p.substr(10));
            if (!h) return tl::unexpected(std::move(h.error()));
            if (f.stream_id == 0) return malformed("SYN_STREAM for stream 0");
            f.headers = std::move(*h);
            return f;
        }
        case FrameType::syn_reply:
        case FrameType::headers: {
            if (p.size() < 4) return malformed("SYN_REPLY/HEADERS shorter than 4 bytes");
            if ((flags & ~flag_fin) != 0) return malformed("SYN_REPLY/HEADERS with unknown flags");
            std::uint32_t id = get32(p, 0) & 0x7fffffff;
            auto h = headers_from(p.substr(4));
            if (!h) return tl::unexpected(std::move(h.error()));
            if (id == 0) return malformed("SYN_REPLY/HEADERS for stream 0");
            if (static_cast<FrameType>(type) == FrameType::syn_reply)
                return SynReply{id, (flags & flag_fin) != 0, std::move(*h)};
            return Headers{id, (flags & flag_fin) != 0, std::move(*h)};
        }
        case FrameType::rst_stream:
            if (p.size() != 8) return malformed("RST_STREAM length is not 8");
            if (flags != 0) return malformed("RST_STREAM with flags");
            return RstStream{get32(p, 0) & 0x7fffffff, get32(p, 4)};
        case FrameType::settings: {
            if (p.size() < 4) return malformed("SETTINGS shorter than 4 bytes");
            std::uint32_t count = get32(p, 0);
            if (p.size() - 4 != static_cast<std::size_t>(count) * 8)
                return malformed("SETTINGS length does not match its count");
            Settings f;
            f.clear_settings = (flags & 0x01) != 0;
            for (std::uint32_t i = 0; i < count; ++i) {
                std::uint32_t w = get32(p, 4 + 8 * i);
                f.entries.push_back(Setting{static_cast<std::uint8_t>(w >> 24), w & 0xffffff, get32(p, 8 + 8 * i)});
            }
            return f;
        }
        case FrameType::ping:
            if (p.size() != 4) return malformed("PING length is not 4");
            if (flags != 0) return malformed("PING with flags");
            return Ping{get32(p, 0)};
        case FrameType::goaway:
            if (p.size() != 8) return malformed("GOAWAY length is not 8");
            if (flags != 0) return malformed("GOAWAY with flags");
            return GoAway{get32(p, 0) & 0x7fffffff, get32(p, 4)};
        case FrameType::window_update: {
            if (p.size() != 8) return malformed("WINDOW_UPDATE length is not 8");
            if (flags != 0) return malformed("WINDOW_UPDATE with flags");
            std::uint32_t delta = get32(p, 4) & 0x7fffffff;
            if (delta == 0) return malformed("WINDOW_UPDATE with delta 0");
            return WindowUpdate{get32(p, 0) & 0x7fffffff, delta};
        }
    }
    return UnknownControl{type};
}

// ---- encoder ----

Result<std::string> Encoder::header_frame_block(const HeaderBlock& headers, std::size_t fixed) {
    // Refused before deflating: the deflate stream is shared with the peer's inflater, and a
    // block deflated but never sent would desynchronise them. zlib adds at most ~0.03% + 64 bytes.
    std::size_t raw = 4;
    for (const auto& [name, value] : headers) raw += 8 + name.size() + value.size();
    if (raw + raw / 1000 + 64 + fixed > max_data_length)
        return fail(errc::invalid_argument, "SPDY: header block too large for one frame");
    auto block = deflater_.deflate(encode_header_block(headers));
    if (block && block->size() + fixed > max_data_length)
        return fail(errc::invalid_argument, "SPDY: header block too large for one frame");
    return block;
}

std::string Encoder::data(std::uint32_t stream_id, std::string_view payload, bool fin) {
    // The length field has 24 bits: a larger payload becomes several frames, FIN on the last.
    std::string out;
    out.reserve(payload.size() + 8 * (1 + payload.size() / max_data_length));
    do {
        std::string_view part = payload.substr(0, max_data_length);
        payload.remove_prefix(part.size());
        const bool last = payload.empty();
        put32(out, stream_id & 0x7fffffff);
        put32(out,
              (static_cast<std::uint32_t>(fin && last ? flag_fin : 0) << 24) | static_cast<std::uint32_t>(part.size()));
        out.append(part);
    } while (!payload.empty());
    return out;
}

Result<std::string> Encoder::syn_stream(const SynStream& f) {
    auto block = header_frame_block(f.headers, 10);
    if (!block) return block;
    std::uint8_t flags = (f.fin ? flag_fin : 0) | (f.unidirectional ? flag_unidirectional : 0);
    std::string out = control_header(FrameType::syn_stream, flags, 10 + block->size());
    put32(out, f.stream_id & 0x7fffffff);
    put32(out, f.associated_stream_id & 0x7fffffff);
    out.push_back(static_cast<char>((f.priority & 0x7) << 5));
    out.push_back(static_cast<char>(f.slot));
    out.append(*block);
    return out;
}

Result<std::string> Encoder::syn_reply(std::uint32_t stream_id, const HeaderBlock& headers, bool fin) {
    auto block = header_frame_block(headers, 4);
    if (!block) return block;
    std::string out = control_header(FrameType::syn_reply, fin ? flag_fin : 0, 4 + block->size());
    put32(out, stream_id & 0x7fffffff);
    out.append(*block);
    return out;
}

Result<std::string> Encoder::headers(std::uint32_t stream_id, const HeaderBlock& headers, bool fin) {
    auto block = header_frame_block(headers, 4);
    if (!block) return block;
    std::string out = control_header(FrameType::headers, fin ? flag_fin : 0, 4 + block->size());
    put32(out, stream_id & 0x7fffffff);
    out.append(*block);
    return out;
}

std::string Encoder::rst_stream(std::uint32_t stream_id, RstStatus status) {
    std::string out = control_header(FrameType::rst_stream, 0, 8);
    put32(out, stream_id & 0x7fffffff);
    put32(out, static_cast<std::uint32_t>(status));
    return out;
}

std::string Encoder::settings(const Settings& f) {
    std::string out = control_header(FrameType::settings, f.clear_settings ? 0x01 : 0, 4 + 8 * f.entries.size());
    put32(out, static_cast<std::uint32_t>(f.entries.size()));
    for (const auto& e : f.entries) {
        put32(out, (static_cast<std::uint32_t>(e.flags) << 24) | (e.id & 0xffffff));
        put32(out, e.value);
    }
    return out;
}

std::string Encoder::ping(std::uint32_t id) {
    std::string out = control_header(FrameType::ping, 0, 4);
    put32(out, id);
    return out;
}

std::string Encoder::goaway(std::uint32_t last_good_stream_id, GoAwayStatus status) {
    std::string out = control_header(FrameType::goaway, 0, 8);
    put32(out, last_good_stream_id & 0x7fffffff);
    put32(out, static_cast<std::uint32_t>(status));
    return out;
}

std::string Encoder::window_update(std::uint32_t stream_id, std::uint32_t delta) {
    std::string out = control_header(FrameType::window_update, 0, 8);
    put32(out, stream_id & 0x7fffffff);
    put32(out, delta & 0x7fffffff);
    return out;
}

}  // namespace kubesandbox::local::spdy
