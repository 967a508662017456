#include "proto/channel_protocol.hpp"

#include <gtest/gtest.h>

namespace ks = kubesandbox;
namespace proto = kubesandbox::proto;
using ks::errc;
using namespace std::string_literals;

TEST(ChannelProtocol, EncodeDecodeRoundTrip) {
    auto msg = proto::encode_channel_frame(2, "err\0out"s);
    EXPECT_EQ(msg, "\x02"s + "err\0out"s);
    auto f = proto::decode_channel_frame(msg);
    ASSERT_TRUE(f);
    EXPECT_EQ(f->channel, 2);
    EXPECT_EQ(f->payload, "err\0out"s);
}

TEST(ChannelProtocol, EmptyPayloadIsLegal) {
    auto f = proto::decode_channel_frame("\x01"s);
    ASSERT_TRUE(f);
    EXPECT_EQ(f->channel, 1);
    EXPECT_TRUE(f->payload.empty());
}

TEST(ChannelProtocol, EmptyMessageIsInvalid) {
    auto f = proto::decode_channel_frame("");
    ASSERT_FALSE(f);
    EXPECT_TRUE(f.error().is(errc::invalid_response));
}

TEST(ChannelProtocol, CloseSignal) {
    auto msg = proto::encode_close_signal(0);
    EXPECT_EQ(msg, "\xff\x00"s);
    auto f = proto::decode_channel_frame(msg);
    ASSERT_TRUE(f);
    EXPECT_EQ(f->channel, proto::close_channel);
    auto c = proto::closed_channel(*f);
    ASSERT_TRUE(c);
    ASSERT_TRUE(c->has_value());
    EXPECT_EQ(**c, 0);

    auto bad = proto::closed_channel(proto::ChannelFrame{255, "\x00\x01"s});
    ASSERT_FALSE(bad);
    EXPECT_TRUE(bad.error().is(errc::invalid_response));
    auto none = proto::closed_channel(proto::ChannelFrame{1, "x"});
    ASSERT_TRUE(none);
    EXPECT_FALSE(none->has_value());
}

TEST(ChannelProtocol, PortPrefixIsLittleEndian) {
    EXPECT_EQ(proto::encode_port_prefix(0, 8080), "\x00\x90\x1f"s);
    EXPECT_EQ(proto::encode_port_prefix(proto::port_forward_error_channel(0), 8080), "\x01\x90\x1f"s);
    EXPECT_EQ(proto::port_forward_data_channel(1), 2);
    EXPECT_EQ(proto::port_forward_error_channel(1), 3);
    auto p = proto::decode_port_prefix("\x90\x1f"s);
    ASSERT_TRUE(p);
    EXPECT_EQ(*p, 8080);
    auto p2 = proto::decode_port_prefix(
        "\xff\xff"
        "data"s);
    ASSERT_TRUE(p2);
    EXPECT_EQ(*p2, 65535);
    auto short_prefix = proto::decode_port_prefix("\x90"s);
    ASSERT_FALSE(short_prefix);
    EXPECT_TRUE(short_prefix.error().is(errc::invalid_response));
}

TEST(ChannelProtocol, ParsePortList) {
    auto one = proto::parse_port_list("8080");
    ASSERT_TRUE(one);
    EXPECT_EQ(*one, (std::vector<std::uint16_t>{8080}));
    auto two = proto::parse_port_list("8080,9090");
    ASSERT_TRUE(two);
    EXPECT_EQ(*two, (std::vector<std::uint16_t>{8080, 9090}));
    for (const char* bad : {"", "0", "65536", "80a", "8080,", ",8080", "-1"}) {
        auto r = proto::parse_port_list(bad);
        ASSERT_FALSE(r) << bad;
        EXPECT_TRUE(r.error().is(errc::bad_request)) << bad;
    }
}
