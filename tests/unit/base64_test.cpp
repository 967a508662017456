// base64 as kubeconfigs and the sandbox runtime's streams use it: the decoder's fast path (four
// symbols at a time) against a plain one symbol at a time, on random input of every kind.
#include "proto/base64.hpp"

#include <gtest/gtest.h>

#include <random>

namespace ks = kubesandbox;

namespace {

// One symbol at a time: the rules of base64_decode, written the plainest way.
std::optional<std::string> reference_decode(std::string_view in) {
    static const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    std::uint32_t acc = 0;
    int bits = 0;
    std::size_t symbols = 0, padding = 0;
    for (char c : in) {
        if (c == '\n' || c == '\r') continue;
        if (c == '=') {
            ++padding;
            continue;
        }
        auto v = alphabet.find(c);
        if (v == std::string::npos || padding != 0) return std::nullopt;
        ++symbols;
        acc = (acc << 6) | static_cast<std::uint32_t>(v);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out.push_back(static_cast<char>((acc >> bits) & 0xff));
        }
    }
    if (symbols % 4 == 1) return std::nullopt;
    if (padding != 0 && (symbols % 4 == 0 || symbols % 4 + padding != 4)) return std::nullopt;
    return out;
}

// Line breaks dropped, then whatever does not fill a group of four cut off, then decoded.
std::optional<std::string> reference_whole_groups(std::string_view in) {
    std::string compact;
    for (char c : in)
        if (c != '\n' && c != '\r') compact += c;
    compact.resize(compact.size() - compact.size() % 4);
    return reference_decode(compact);
}

std::string wrapped(std::string_view encoded, std::size_t width) {
    std::string out;
    for (std::size_t i = 0; i < encoded.size(); i += width) {
        out.append(encoded.substr(i, width));
        out += '\n';
    }
    return out;
}

}  // namespace

TEST(Base64, RoundTripsAndRejectsGarbage) {
    for (std::string s : {"", "a", "ab", "abc", "abcd", "hello world\n\x01\xff"}) {
        auto enc = ks::proto::base64_encode(s);
        auto dec = ks::proto::base64_decode(enc);
        ASSERT_TRUE(dec) << enc;
        EXPECT_EQ(*dec, s);
    }
    EXPECT_EQ(ks::proto::base64_encode("abc"), "YWJj");
    EXPECT_EQ(ks::proto::base64_encode("ab"), "YWI=");
    EXPECT_EQ(*ks::proto::base64_decode("YWJj\nZGVm\n"), "abcdef");
    EXPECT_EQ(*ks::proto::base64_decode("YWI"), "ab");  // unpadded
    EXPECT_FALSE(ks::proto::base64_decode("YW*j"));
    EXPECT_FALSE(ks::proto::base64_decode("Y"));
    EXPECT_FALSE(ks::proto::base64_decode("YQ==YQ=="));
    EXPECT_FALSE(ks::proto::base64_decode("YWJj="));
    EXPECT_FALSE(ks::proto::base64_decode(std::string_view("YWJjYWJj\0", 9)));
}

TEST(Base64, FastPathDecodesAsOneSymbolAtATime) {
    std::mt19937 rng(20261129);
    const std::string symbols = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    // Mostly base64 with line breaks, padding and now and then a byte that is not.
    for (int round = 0; round < 20000; ++round) {
        std::string in;
        const int n = static_cast<int>(rng() % 40);
        for (int i = 0; i < n; ++i) {
            auto roll = rng() % 100;
            if (roll < 80) {
                in += symbols[rng() % 64];
            } else if (roll < 90) {
                in += '\n';
            } else if (roll < 95) {
                in += '=';
            } else if (roll < 97) {
                in += '\r';
            } else {
                in += static_cast<char>(rng() % 256);
            }
        }
        EXPECT_EQ(ks::proto::base64_decode(in), reference_decode(in)) << "input '" << in << "'";
    }
    // Encoded data wrapped as `base64` prints it, cut anywhere (a capped stream).
    for (int round = 0; round < 2000; ++round) {
        std::string data(rng() % 300, '\0');
        for (auto& c : data) c = static_cast<char>(rng() % 256);
        std::string text = wrapped(ks::proto::base64_encode(data), round % 2 ? 76 : 5);
        auto whole = ks::proto::base64_decode(text);
        ASSERT_TRUE(whole);
        EXPECT_EQ(*whole, data);
        const std::size_t cut = text.empty() ? 0 : rng() % (text.size() + 1);
        auto part = ks::proto::base64_decode_whole_groups(std::string_view(text).substr(0, cut));
        EXPECT_EQ(part, reference_whole_groups(std::string_view(text).substr(0, cut))) << text.substr(0, cut);
        EXPECT_TRUE(part && data.starts_with(*part));
        std::string in_place = text.substr(0, cut);
        EXPECT_TRUE(ks::proto::base64_decode_whole_groups_in_place(in_place));
        EXPECT_EQ(in_place, part.value_or("")) << "decoded over itself";
    }
    for (std::string bad : {"YW*jYWJj", "YWJjY!", "YQ==Y"})
        EXPECT_FALSE(ks::proto::base64_decode_whole_groups_in_place(bad));
    EXPECT_EQ(ks::proto::base64_decode_whole_groups("YQ=="), "a");
    EXPECT_EQ(ks::proto::base64_decode_whole_groups("YWJjZA"), "abc");
    EXPECT_FALSE(ks::proto::base64_decode_whole_groups("YW*jYWJj"));
    EXPECT_FALSE(ks::proto::base64_decode_whole_groups("YWJjY!"));  // checked to the end
    EXPECT_FALSE(ks::proto::base64_decode_whole_groups("YQ==Y"));   // data after padding
}

TEST(Base64, LargeWrappedStreams) {
    std::string data(3'000'000, '\0');
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>((i * 7919) >> 3);
    auto text = wrapped(ks::proto::base64_encode(data), 76);
    auto back = ks::proto::base64_decode(text);
    ASSERT_TRUE(back);
    EXPECT_TRUE(*back == data);
    auto groups = ks::proto::base64_decode_whole_groups(text);
    ASSERT_TRUE(groups);
    EXPECT_TRUE(*groups == data);
}
