// util::append_large: growing past its threshold in pieces of every size keeps every byte in
// order, and small strings stay plain appends; append_capped takes its cap once.
#include "util/large_string.hpp"

#include <gtest/gtest.h>

#include <string>

namespace {

std::string piece(std::size_t n, unsigned seed) {
    std::string s(n, '\0');
    for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 31 + seed) & 0xff);
    return s;
}

TEST(LargeString, AppendsAcrossTheThresholdKeepEveryByteInOrder) {
    std::string grown, expected;
    unsigned seed = 0;
    // 1 byte up to 3 MiB pieces, past 4 MiB several times over.
    for (std::size_t n : {1u, 4095u, 65536u, 1u << 20, 3u << 20, 7u, 2u << 20, 5u << 20, 0u, 3u << 20}) {
        const std::string p = piece(n, ++seed);
        kubesandbox::util::append_large(grown, p);
        expected += p;
        ASSERT_EQ(grown.size(), expected.size());
    }
    EXPECT_TRUE(grown == expected);
    EXPECT_GE(grown.capacity(), grown.size());
}

// A capped string past the threshold takes its cap at once (never moved again) and stops there;
// a cap above 1 GiB keeps geometric growth.
TEST(LargeString, ACappedStringTakesItsCapOnceAndStopsThere) {
    constexpr std::size_t cap = 24u << 20;
    std::string s, expected;
    bool truncated = false;
    unsigned seed = 0;
    const char* moved_from = nullptr;
    for (int i = 0; i < 30; ++i) {
        const std::string p = piece(1u << 20, ++seed);
        kubesandbox::util::append_capped(s, p, cap, truncated);
        if (expected.size() < cap) expected += p.substr(0, cap - expected.size());
        if (s.size() > (4u << 20)) {
            EXPECT_EQ(s.capacity(), cap);
            if (!moved_from) moved_from = s.data();
            EXPECT_EQ(s.data(), moved_from) << "moved after taking its cap, at " << s.size();
        }
    }
    EXPECT_TRUE(truncated);
    EXPECT_EQ(s.size(), cap);
    EXPECT_TRUE(s == expected);
    std::string uncapped;
    bool never = false;
    kubesandbox::util::append_capped(uncapped, piece(5u << 20, 1), std::size_t{4} << 30, never);
    EXPECT_FALSE(never);
    EXPECT_LT(uncapped.capacity(), std::size_t{1} << 30);
}

TEST(LargeString, SmallStringsGrowAsUsual) {
    std::string s = "abc";
    kubesandbox::util::append_large(s, "def");
    EXPECT_EQ(s, "abcdef");
    std::string empty;
    kubesandbox::util::append_large(empty, "");
    EXPECT_TRUE(empty.empty());
}

}  // namespace
