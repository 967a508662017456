// SPDY/3.1 framing as spoken by client-go/kubectl for port-forward (and the SPDY fallback of
// exec): a frame decoder that accepts bytes split anywhere, a frame encoder, and the zlib header
// block compression with the SPDY/3 dictionary. One Decoder and one Encoder per connection: each
// owns the connection's single zlib stream for its direction. Sans-IO.
#pragma once

#include <kubesandbox/error.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace kubesandbox::local::spdy {

inline constexpr std::uint16_t version = 3;
inline constexpr std::uint32_t max_data_length = (1u << 24) - 1;
inline constexpr std::uint32_t default_initial_window = 64 * 1024;

enum class FrameType : std::uint16_t {
    syn_stream = 1,
    syn_reply = 2,
    rst_stream = 3,
    settings = 4,
    ping = 6,
    goaway = 7,
    headers = 8,
    window_update = 9,
};

inline constexpr std::uint8_t flag_fin = 0x01;
inline constexpr std::uint8_t flag_unidirectional = 0x02;

// RST_STREAM status codes.
enum class RstStatus : std::uint32_t {
    protocol_error = 1,
    invalid_stream = 2,
    refused_stream = 3,
    unsupported_version = 4,
    cancel = 5,
    internal_error = 6,
    flow_control_error = 7,
    stream_in_use = 8,
    stream_already_closed = 9,
    frame_too_large = 11,
};

// GOAWAY status codes.
enum class GoAwayStatus : std::uint32_t { ok = 0, protocol_error = 1, internal_error = 2 };

// Name/value pairs; names lowercase; several values of one name are joined with NUL.
using HeaderBlock = std::vector<std::pair<std::string, std::string>>;

// The value of `name` in `headers`, nullopt when absent.
std::optional<std::string_view> find_header(const HeaderBlock& headers, std::string_view name);

struct DataFrame {
    std::uint32_t stream_id = 0;
    bool fin = false;
    std::string data;
};
struct SynStream {
    std::uint32_t stream_id = 0;
    std::uint32_t associated_stream_id = 0;
    std::uint8_t priority = 0;  // 0..7
    std::uint8_t slot = 0;
    bool fin = false;
    bool unidirectional = false;
    HeaderBlock headers;
};
struct SynReply {
    std::uint32_t stream_id = 0;
    bool fin = false;
    HeaderBlock headers;
};
struct RstStream {
    std::uint32_t stream_id = 0;
    std::uint32_t status = 0;
};
struct Setting {
    std::uint8_t flags = 0;
    std::uint32_t id = 0;  // 24 bits
    std::uint32_t value = 0;
};
struct Settings {
    bool clear_settings = false;  // flag 0x01
    std::vector<Setting> entries;
};
struct Ping {
    std::uint32_t id = 0;
};
struct GoAway {
    std::uint32_t last_good_stream_id = 0;
    std::uint32_t status = 0;
};
struct Headers {
    std::uint32_t stream_id = 0;
    bool fin = false;
    HeaderBlock headers;
};
struct WindowUpdate {
    std::uint32_t stream_id = 0;
    std::uint32_t delta = 0;
};
// A control frame of a type this implementation does not know; SPDY says to ignore it.
struct UnknownControl {
    std::uint16_t type = 0;
};

using Frame = std::variant<DataFrame, SynStream, SynReply, RstStream, Settings, Ping, GoAway, Headers, WindowUpdate,
                           UnknownControl>;

// The SPDY/3 header compression dictionary (1423 bytes, Adler-32 0xE3C6A7C2).
std::string_view dictionary();

// Uncompressed header block layout (32-bit counts and lengths).
std::string encode_header_block(const HeaderBlock& headers);
// Rejects truncated blocks, trailing bytes, empty or uppercase names and duplicate names.
Result<HeaderBlock> decode_header_block(std::string_view block);

// The persistent inflate stream of one connection direction.
class HeaderInflater {
public:
    HeaderInflater();
    ~HeaderInflater();
    HeaderInflater(HeaderInflater&&) noexcept;
    HeaderInflater& operator=(HeaderInflater&&) noexcept;
    // Decompresses one complete compressed block (which must end with a sync flush).
    Result<std::string> inflate(std::string_view compressed);

private:
    struct State;
    std::unique_ptr<State> state_;
};

// The persistent deflate stream of one connection direction.
class HeaderDeflater {
public:
    HeaderDeflater();
    ~HeaderDeflater();
    HeaderDeflater(HeaderDeflater&&) noexcept;
    HeaderDeflater& operator=(HeaderDeflater&&) noexcept;
    // Compresses one block and ends it with a sync flush.
    Result<std::string> deflate(std::string_view raw);

private:
    struct State;
    std::unique_ptr<State> state_;
};

// Incremental frame decoder. Errors are fatal for the connection (the zlib context is lost):
// errc::invalid_response for malformed frames, errc::unsupported for a wrong SPDY version,
// errc::request_entity_too_large for frames over the configured limit.
class Decoder {
public:
    explicit Decoder(std::size_t max_frame_length = max_data_length);

    void feed(std::string_view bytes);
    // The next complete frame, nullopt when more bytes are needed.
    Result<std::optional<Frame>> next();
    std::size_t buffered() const noexcept { return buffer_.size() - pos_; }

private:
    Result<Frame> decode_control(std::uint16_t type, std::uint8_t flags, std::string_view payload);
    Result<HeaderBlock> headers_from(std::string_view compressed);

    std::string buffer_;
    std::size_t pos_ = 0;
    std::size_t max_frame_length_;
    HeaderInflater inflater_;
    bool failed_ = false;
};

// Frame encoder; the header-carrying frames share the connection's deflate stream, so they must
// be written to the wire in the order they were encoded.
class Encoder {
public:
    // One DATA frame per max_data_length bytes (FIN on the last); an empty payload is one frame.
    std::string data(std::uint32_t stream_id, std::string_view payload, bool fin);
    Result<std::string> syn_stream(const SynStream& frame);
    Result<std::string> syn_reply(std::uint32_t stream_id, const HeaderBlock& headers, bool fin = false);
    Result<std::string> headers(std::uint32_t stream_id, const HeaderBlock& headers, bool fin = false);
    std::string rst_stream(std::uint32_t stream_id, RstStatus status);
    std::string settings(const Settings& frame);
    std::string ping(std::uint32_t id);
    std::string goaway(std::uint32_t last_good_stream_id, GoAwayStatus status);
    std::string window_update(std::uint32_t stream_id, std::uint32_t delta);

private:
    // The deflated block of a header-carrying frame with `fixed` bytes before it, or an error when
    // the frame's 24-bit length could not hold it.
    Result<std::string> header_frame_block(const HeaderBlock& headers, std::size_t fixed);

    HeaderDeflater deflater_;
};

}  // namespace kubesandbox::local::spdy
