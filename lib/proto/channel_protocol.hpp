// The Kubernetes channel protocol used by exec and port-forward over WebSocket
// (v4/v5.channel.k8s.io): every binary message is one channel byte followed by the payload.
// Sans-IO.
#pragma once

#include <kubesandbox/error.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kubesandbox::proto {

// v5 CLOSE signal: a message of exactly {255, channel}.
inline constexpr std::uint8_t close_channel = 255;

std::string encode_channel_frame(std::uint8_t channel, std::string_view payload);

struct ChannelFrame {
    std::uint8_t channel;
    std::string_view payload;  // points into the decoded message
};

// An empty message has no channel byte: errc::invalid_response.
Result<ChannelFrame> decode_channel_frame(std::string_view message);

std::string encode_close_signal(std::uint8_t channel);  // {255, channel}

// When `frame` is a v5 CLOSE signal, the channel it closes; a CLOSE message with a payload that
// is not exactly one byte is malformed (errc::invalid_response). nullopt for any other channel.
Result<std::optional<std::uint8_t>> closed_channel(const ChannelFrame& frame);

// Port-forward (v4.channel.k8s.io): for the i-th port, data channel 2i and error channel 2i+1;
// the first message on each carries the port as 2 bytes little-endian.
inline constexpr std::uint8_t port_forward_data_channel(std::size_t index) {
    return static_cast<std::uint8_t>(2 * index);
}
inline constexpr std::uint8_t port_forward_error_channel(std::size_t index) {
    return static_cast<std::uint8_t>(2 * index + 1);
}
std::string encode_port_prefix(std::uint8_t channel, std::uint16_t port);
// Reads the 2-byte prefix from a channel's first payload; a payload shorter than 2 bytes is
// errc::invalid_response. Any bytes after the prefix are data.
Result<std::uint16_t> decode_port_prefix(std::string_view payload);

// Parses the `ports` query values ("8080", "8080,9090", repeated parameters already joined with
// ','): each must be a decimal 1..65535. Empty or invalid: errc::bad_request.
Result<std::vector<std::uint16_t>> parse_port_list(std::string_view ports);

}  // namespace kubesandbox::proto
