// util::append_large: growing past its threshold in pieces of every size keeps every byte in
// order, and small strings stay plain appends.
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

TEST(LargeString, SmallStringsGrowAsUsual) {
    std::string s = "abc";
    kubesandbox::util::append_large(s, "def");
    EXPECT_EQ(s, "abcdef");
    std::string empty;
    kubesandbox::util::append_large(empty, "");
    EXPECT_TRUE(empty.empty());
}

}  // namespace
