#include "proto/channel_protocol.hpp"

#include <charconv>

namespace kubesandbox::proto {

std::string encode_channel_frame(std::uint8_t channel, std::string_view payload) {
    std::string out;
    out.reserve(payload.size() + 1);
    out.push_back(static_cast<char>(channel));
    out.append(payload);
    return out;
}

Result<ChannelFrame> decode_channel_frame(std::string_view message) {
    if (message.empty()) return fail(errc::invalid_response, "empty channel message (no channel byte)");
    return ChannelFrame{static_cast<std::uint8_t>(message.front()), message.substr(1)};
}

std::string encode_close_signal(std::uint8_t channel) {
    return std::string{static_cast<char>(close_channel), static_cast<char>(channel)};
}

Result<std::optional<std::uint8_t>> closed_channel(const ChannelFrame& frame) {
    if (frame.channel != close_channel) return std::optional<std::uint8_t>{};
    if (frame.payload.size() != 1)
        return fail(errc::invalid_response, "malformed CLOSE signal: expected exactly one channel byte");
    return std::optional<std::uint8_t>{static_cast<std::uint8_t>(frame.payload.front())};
}

std::string encode_port_prefix(std::uint8_t channel, std::uint16_t port) {
    std::string out;
    out.push_back(static_cast<char>(channel));
    out.push_back(static_cast<char>(port & 0xff));
    out.push_back(static_cast<char>(port >> 8));
    return out;
}

Result<std::uint16_t> decode_port_prefix(std::string_view payload) {
    if (payload.size() < 2) return fail(errc::invalid_response, "port-forward channel prefix shorter than 2 bytes");
    auto lo = static_cast<std::uint8_t>(payload[0]);
    auto hi = static_cast<std::uint8_t>(payload[1]);
    return static_cast<std::uint16_t>(lo | (hi << 8));
}

Result<std::vector<std::uint16_t>> parse_port_list(std::string_view ports) {
    std::vector<std::uint16_t> out;
    if (ports.empty()) return fail(errc::bad_request, "query parameter \"port\" is required");
    while (true) {
        auto comma = ports.find(',');
        auto item = ports.substr(0, comma);
        unsigned value = 0;
        auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
        if (item.empty() || ec != std::errc{} || end != item.data() + item.size() || value < 1 || value > 65535)
            return fail(errc::bad_request, "invalid port \"" + std::string(item) + "\"");
        out.push_back(static_cast<std::uint16_t>(value));
        if (comma == std::string_view::npos) break;
        ports.remove_prefix(comma + 1);
    }
    return out;
}

}  // namespace kubesandbox::proto
