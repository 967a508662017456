#include "local/spdy.hpp"

#include <gtest/gtest.h>

namespace ks = kubesandbox;
namespace spdy = kubesandbox::local::spdy;
using ks::errc;
using namespace std::string_literals;

namespace {

// Adler-32 (RFC 1950), written out so the test does not depend on zlib itself.
std::uint32_t adler32_of(std::string_view s) {
    std::uint32_t a = 1, b = 0;
    for (unsigned char c : s) {
        a = (a + c) % 65521;
        b = (b + a) % 65521;
    }
    return (b << 16) | a;
}

std::string hex(std::string_view s) {
    static const char* digits = "0123456789abcdef";
    std::string out;
    for (unsigned char c : s) {
        if (!out.empty()) out.push_back(' ');
        out.push_back(digits[c >> 4]);
        out.push_back(digits[c & 15]);
    }
    return out;
}

// Decodes `wire` fed in two pieces split at `split`, collecting every frame.
std::vector<spdy::Frame> decode_split(std::string_view wire, std::size_t split) {
    spdy::Decoder d;
    std::vector<spdy::Frame> out;
    for (auto piece : {wire.substr(0, split), wire.substr(split)}) {
        d.feed(piece);
        while (true) {
            auto f = d.next();
            EXPECT_TRUE(f) << f.error().message;
            if (!f || !*f) break;
            out.push_back(std::move(**f));
        }
    }
    EXPECT_EQ(d.buffered(), 0u);
    return out;
}

spdy::HeaderBlock pf_headers(std::string type, std::string port, std::string id) {
    return {{"streamtype", std::move(type)}, {"port", std::move(port)}, {"requestid", std::move(id)}};
}

}  // namespace

TEST(Spdy, DictionaryMatchesSpec) {
    auto d = spdy::dictionary();
    EXPECT_EQ(d.size(), 1423u);
    EXPECT_EQ(adler32_of(d), 0xE3C6A7C2u);
}

TEST(Spdy, WorkedBytesFromSpec) {
    spdy::Encoder e;
    auto reply = e.syn_reply(1, {});
    ASSERT_TRUE(reply);
    EXPECT_EQ(hex(*reply), "80 03 00 02 00 00 00 14 00 00 00 01 78 f9 e3 c6 a7 c2 02 a6 23 06 00 00 00 00 ff ff");
    auto second = e.syn_reply(3, {});
    ASSERT_TRUE(second);
    EXPECT_EQ(hex(second->substr(12)), "02 01 00 00 00 00 ff ff");
    EXPECT_EQ(hex(e.ping(1)), "80 03 00 06 00 00 00 04 00 00 00 01");
    EXPECT_EQ(hex(e.data(1, "", true)), "00 00 00 01 01 00 00 00");
    EXPECT_EQ(hex(e.rst_stream(3, spdy::RstStatus::cancel)), "80 03 00 03 00 00 00 08 00 00 00 03 00 00 00 05");
    EXPECT_EQ(hex(e.goaway(0, spdy::GoAwayStatus::ok)), "80 03 00 07 00 00 00 08 00 00 00 00 00 00 00 00");
    auto block = spdy::encode_header_block(pf_headers("error", "8080", "0"));
    EXPECT_EQ(block,
              "\0\0\0\x03\0\0\0\x0astreamtype\0\0\0\x05"
              "error\0\0\0\x04port\0\0\0\x04"
              "8080\0\0\0\x09requestid\0\0\0\x01"
              "0"s);
}

TEST(Spdy, HeaderBlockRoundTripAcrossBlocks) {
    spdy::HeaderDeflater def;
    spdy::HeaderInflater inf;
    for (int i = 0; i < 5; ++i) {
        auto h = pf_headers(i % 2 ? "data" : "error", std::to_string(8080 + i), std::to_string(i));
        h.emplace_back("x-multi", "a\0b"s);
        auto raw = spdy::encode_header_block(h);
        auto c = def.deflate(raw);
        ASSERT_TRUE(c);
        ASSERT_GE(c->size(), 4u);
        EXPECT_EQ(c->substr(c->size() - 4), "\0\0\xff\xff"s);  // sync flush
        auto back = inf.inflate(*c);
        ASSERT_TRUE(back) << back.error().message;
        auto decoded = spdy::decode_header_block(*back);
        ASSERT_TRUE(decoded);
        EXPECT_EQ(*decoded, h);
    }
}

TEST(Spdy, EveryFrameTypeSurvivesEverySplit) {
    spdy::Encoder e;
    std::string wire;
    spdy::SynStream syn;
    syn.stream_id = 1;
    syn.priority = 3;
    syn.headers = pf_headers("error", "18080", "0");
    wire += *e.syn_stream(syn);
    wire += e.data(1, "", true);
    syn.stream_id = 3;
    syn.fin = false;
    syn.headers = pf_headers("data", "18080", "0");
    wire += *e.syn_stream(syn);
    wire += *e.syn_reply(3, {{"a", "b"}});
    wire += e.data(3, "GET / HTTP/1.0\r\n\r\n", false);
    wire += *e.headers(3, {{"x", "y"}}, true);
    wire += e.window_update(3, 4096);
    wire += e.settings(spdy::Settings{false, {{0, 7, 65536}}});
    wire += e.ping(7);
    wire += e.rst_stream(3, spdy::RstStatus::cancel);
    wire += e.goaway(3, spdy::GoAwayStatus::ok);

    for (std::size_t split = 0; split <= wire.size(); ++split) {
        auto frames = decode_split(wire, split);
        ASSERT_EQ(frames.size(), 11u) << "split at " << split;
        auto& s1 = std::get<spdy::SynStream>(frames[0]);
        EXPECT_EQ(s1.stream_id, 1u);
        EXPECT_EQ(s1.priority, 3);
        EXPECT_EQ(spdy::find_header(s1.headers, "streamtype"), "error");
        auto& d1 = std::get<spdy::DataFrame>(frames[1]);
        EXPECT_TRUE(d1.fin);
        EXPECT_TRUE(d1.data.empty());
        auto& s3 = std::get<spdy::SynStream>(frames[2]);
        EXPECT_EQ(s3.stream_id, 3u);
        EXPECT_EQ(spdy::find_header(s3.headers, "port"), "18080");
        EXPECT_EQ(std::get<spdy::SynReply>(frames[3]).headers, (spdy::HeaderBlock{{"a", "b"}}));
        auto& d3 = std::get<spdy::DataFrame>(frames[4]);
        EXPECT_EQ(d3.data, "GET / HTTP/1.0\r\n\r\n");
        EXPECT_FALSE(d3.fin);
        EXPECT_TRUE(std::get<spdy::Headers>(frames[5]).fin);
        EXPECT_EQ(std::get<spdy::WindowUpdate>(frames[6]).delta, 4096u);
        auto& st = std::get<spdy::Settings>(frames[7]);
        ASSERT_EQ(st.entries.size(), 1u);
        EXPECT_EQ(st.entries[0].id, 7u);
        EXPECT_EQ(st.entries[0].value, 65536u);
        EXPECT_EQ(std::get<spdy::Ping>(frames[8]).id, 7u);
        EXPECT_EQ(std::get<spdy::RstStream>(frames[9]).status, 5u);
        EXPECT_EQ(std::get<spdy::GoAway>(frames[10]).last_good_stream_id, 3u);
    }
}

TEST(Spdy, ByteAtATime) {
    spdy::Encoder e;
    std::string wire = e.data(5, std::string(1000, 'x'), true) + e.ping(1);
    spdy::Decoder d;
    int frames = 0;
    for (char c : wire) {
        d.feed(std::string_view(&c, 1));
        auto f = d.next();
        ASSERT_TRUE(f);
        if (*f) ++frames;
    }
    EXPECT_EQ(frames, 2);
}

TEST(Spdy, UnknownControlFrameIsReportedNotFatal) {
    spdy::Decoder d;
    d.feed("\x80\x03\x00\x0a\x00\x00\x00\x02zz"s);
    auto f = d.next();
    ASSERT_TRUE(f);
    ASSERT_TRUE(*f);
    EXPECT_EQ(std::get<spdy::UnknownControl>(**f).type, 10);
}

namespace {
ks::Error decode_error(const std::string& wire) {
    spdy::Decoder d(1 << 16);
    d.feed(wire);
    auto f = d.next();
    EXPECT_FALSE(f) << "accepted: " << hex(wire);
    if (f) return ks::make_error(errc::internal_error, "accepted");
    // A failed decoder stays failed.
    EXPECT_FALSE(d.next());
    return f.error();
}
}  // namespace

TEST(Spdy, MalformedFramesAreTypedErrors) {
    EXPECT_TRUE(decode_error("\x80\x02\x00\x06\x00\x00\x00\x04\0\0\0\x01"s).is(errc::unsupported));
    EXPECT_TRUE(decode_error("\x80\x03\x00\x06\x00\x00\x00\x03\0\0\0"s).is(errc::invalid_response));      // PING len 3
    EXPECT_TRUE(decode_error("\x80\x03\x00\x06\x01\x00\x00\x04\0\0\0\x01"s).is(errc::invalid_response));  // PING flags
    EXPECT_TRUE(decode_error("\x80\x03\x00\x07\x00\x00\x00\x04\0\0\0\x01"s).is(errc::invalid_response));  // GOAWAY len
    EXPECT_TRUE(decode_error("\x80\x03\x00\x03\x00\x00\x00\x04\0\0\0\x01"s).is(errc::invalid_response));  // RST len
    EXPECT_TRUE(
        decode_error("\x80\x03\x00\x09\x00\x00\x00\x08\0\0\0\x01\0\0\0\0"s).is(errc::invalid_response));  // delta 0
    EXPECT_TRUE(
        decode_error("\x80\x03\x00\x04\x00\x00\x00\x04\0\0\0\x02"s).is(errc::invalid_response));  // SETTINGS count
    EXPECT_TRUE(decode_error("\x80\x03\x00\x01\x00\x00\x00\x04\0\0\0\x01"s).is(errc::invalid_response));  // SYN short
    EXPECT_TRUE(decode_error("\x00\x00\x00\x00\x00\x00\x00\x00"s).is(errc::invalid_response));  // DATA stream 0
    EXPECT_TRUE(decode_error("\x00\x00\x00\x01\x00\x01\x00\x01"s).is(errc::request_entity_too_large));
    // SYN_STREAM whose header block is not zlib data.
    EXPECT_TRUE(decode_error("\x80\x03\x00\x01\x00\x00\x00\x0e\0\0\0\x01\0\0\0\0\0\0garb"s).is(errc::invalid_response));
}

TEST(Spdy, InvalidHeaderBlocksAreRejected) {
    EXPECT_FALSE(spdy::decode_header_block("\0\0\0"s));
    EXPECT_FALSE(spdy::decode_header_block("\0\0\0\x01\0\0\0\x01"s));                              // truncated
    EXPECT_FALSE(spdy::decode_header_block("\0\0\0\x01\0\0\0\x01P\0\0\0\0"s));                     // uppercase
    EXPECT_FALSE(spdy::decode_header_block("\0\0\0\x01\0\0\0\0\0\0\0\0"s));                        // empty name
    EXPECT_FALSE(spdy::decode_header_block("\0\0\0\x02\0\0\0\x01p\0\0\0\0\0\0\0\x01p\0\0\0\0"s));  // duplicate
    EXPECT_FALSE(spdy::decode_header_block("\0\0\0\0x"s));                                         // trailing
    EXPECT_FALSE(spdy::decode_header_block("\xff\xff\xff\xff"s));                                  // huge count
    auto ok = spdy::decode_header_block("\0\0\0\0"s);
    ASSERT_TRUE(ok);
    EXPECT_TRUE(ok->empty());
    // A header block whose SYN_STREAM uses a corrupt zlib stream poisons the decoder.
    spdy::HeaderInflater inf;
    auto bad = inf.inflate("\x78\xf9\x00\x00\x00\x00\x01\x02"s);
    ASSERT_FALSE(bad);
    EXPECT_TRUE(bad.error().is(errc::invalid_response));
}

namespace {

// DATA lengths have 24 bits: a larger payload is split, not cut (and FIN is on the last part).
TEST(Spdy, LargeDataIsSplitIntoFramesLosingNothing) {
    std::string payload(spdy::max_data_length * 2 + 10, 'x');
    payload[spdy::max_data_length] = 'y';
    spdy::Encoder enc;
    std::string wire = enc.data(3, payload, true);
    spdy::Decoder dec(spdy::max_data_length);
    dec.feed(wire);
    std::string got;
    int frames = 0;
    bool fin_seen = false;
    for (;;) {
        auto f = dec.next();
        ASSERT_TRUE(f) << f.error().message;
        if (!*f) break;
        auto* d = std::get_if<spdy::DataFrame>(&**f);
        ASSERT_NE(d, nullptr);
        EXPECT_FALSE(fin_seen) << "FIN before the last frame";
        fin_seen = d->fin;
        got += d->data;
        ++frames;
    }
    EXPECT_EQ(frames, 3);
    EXPECT_TRUE(fin_seen);
    EXPECT_TRUE(got == payload);
    EXPECT_EQ(enc.data(3, "", true).size(), 8u);
}

// A header too large for a control frame's 24-bit length is an error, not a corrupt frame.
TEST(Spdy, OversizedHeaderBlocksAreRefusedByTheEncoder) {
    spdy::Encoder enc;
    std::string random(spdy::max_data_length + 1, '\0');
    std::uint32_t x = 1;
    for (auto& c : random) c = static_cast<char>((x = x * 1103515245 + 12345) >> 16);  // incompressible
    auto r = enc.syn_reply(1, spdy::HeaderBlock{{"big", random}});
    ASSERT_FALSE(r);
    EXPECT_TRUE(r.error().is(errc::invalid_argument));
}

// 200,000 distinct names decode (a pairwise duplicate check would take hours), and a duplicate
// at the very end is still found.
TEST(Spdy, ManyHeadersDecodeAndTheLastDuplicateIsFound) {
    spdy::HeaderBlock many;
    for (int i = 0; i < 200000; ++i) many.emplace_back("h" + std::to_string(i), "v");
    auto block = spdy::encode_header_block(many);
    auto ok = spdy::decode_header_block(block);
    ASSERT_TRUE(ok);
    EXPECT_EQ(ok->size(), many.size());
    many.emplace_back("h7", "again");
    auto dup = spdy::decode_header_block(spdy::encode_header_block(many));
    ASSERT_FALSE(dup);
    EXPECT_NE(dup.error().message.find("duplicate header name \"h7\""), std::string::npos);
}

}  // namespace
