#include "proto/watch_decoder.hpp"

#include <gtest/gtest.h>

#include <boost/json/serialize.hpp>

namespace ks = kubesandbox;
namespace proto = ks::proto;
using ks::errc;
using Type = ks::WatchEvent::Type;

namespace {

const std::string stream =
    "{\"type\":\"ADDED\",\"object\":{\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\",\"resourceVersion\":\"1001\","
    "\"annotations\":{\"note\":\"h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80\"}}}}\n"
    "{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"name\":\"p\",\"resourceVersion\":\"1005\"}}}\r\n"
    "\n"
    "  \r\n"
    "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"Pod\",\"metadata\":{\"resourceVersion\":\"1100\"}}}"
    "{\"type\":\"DELETED\",\"object\":{\"metadata\":{\"name\":\"p\",\"resourceVersion\":\"1200\"}}}\n"
    "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"status\":\"Failure\",\"reason\":\"Expired\","
    "\"code\":410,\"message\":\"too old resource version: 900 (1000)\"}}\n";

struct Seen {
    Type type;
    std::string object;
    friend bool operator==(const Seen&, const Seen&) = default;
};

// Drains every complete event; fails the test on an error.
void drain(proto::WatchDecoder& d, std::vector<Seen>& out) {
    while (true) {
        auto ev = d.next();
        ASSERT_TRUE(ev) << ev.error().message;
        if (!*ev) return;
        out.push_back({(*ev)->type, boost::json::serialize((*ev)->object)});
    }
}

std::vector<Seen> decode_whole() {
    proto::WatchDecoder d;
    d.feed(stream);
    std::vector<Seen> out;
    drain(d, out);
    return out;
}

}  // namespace

TEST(WatchDecoder, DecodesAllEventTypes) {
    auto events = decode_whole();
    ASSERT_EQ(events.size(), 5u);
    EXPECT_EQ(events[0].type, Type::added);
    EXPECT_NE(events[0].object.find("h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80"), std::string::npos);
    EXPECT_EQ(events[1].type, Type::modified);
    EXPECT_EQ(events[2].type, Type::bookmark);
    EXPECT_NE(events[2].object.find("1100"), std::string::npos);
    EXPECT_EQ(events[3].type, Type::deleted);  // followed the bookmark without a newline
    EXPECT_EQ(events[4].type, Type::error);
    EXPECT_NE(events[4].object.find("Expired"), std::string::npos);
}

TEST(WatchDecoder, EverySplitPointGivesTheSameEvents) {
    const auto expected = decode_whole();
    ASSERT_EQ(expected.size(), 5u);
    for (std::size_t split = 0; split <= stream.size(); ++split) {
        proto::WatchDecoder d;
        std::vector<Seen> got;
        d.feed(std::string_view(stream).substr(0, split));
        drain(d, got);
        d.feed(std::string_view(stream).substr(split));
        drain(d, got);
        EXPECT_EQ(got, expected) << "split at " << split;
        EXPECT_EQ(d.buffered(), 0u) << "split at " << split;
    }
}

TEST(WatchDecoder, ByteAtATimeAndThreeWaySplits) {
    const auto expected = decode_whole();
    {
        proto::WatchDecoder d;
        std::vector<Seen> got;
        for (char c : stream) {
            d.feed(std::string_view(&c, 1));
            drain(d, got);
        }
        EXPECT_EQ(got, expected);
    }
    // Two cut points, stepping to keep the run short.
    for (std::size_t a = 0; a <= stream.size(); a += 7) {
        for (std::size_t b = a; b <= stream.size(); b += 13) {
            proto::WatchDecoder d;
            std::vector<Seen> got;
            d.feed(std::string_view(stream).substr(0, a));
            drain(d, got);
            d.feed(std::string_view(stream).substr(a, b - a));
            drain(d, got);
            d.feed(std::string_view(stream).substr(b));
            drain(d, got);
            ASSERT_EQ(got, expected) << a << "," << b;
        }
    }
}

TEST(WatchDecoder, PartialEventIsBufferedNotReturned) {
    proto::WatchDecoder d;
    d.feed("{\"type\":\"ADDED\",\"obj");
    auto ev = d.next();
    ASSERT_TRUE(ev);
    EXPECT_FALSE(*ev);
    EXPECT_EQ(d.buffered(), 20u);
    d.feed("ect\":{}}\n");
    ev = d.next();
    ASSERT_TRUE(ev && *ev);
    EXPECT_EQ((*ev)->type, Type::added);
    ev = d.next();
    ASSERT_TRUE(ev);
    EXPECT_FALSE(*ev);
    EXPECT_EQ(d.buffered(), 0u);
}

TEST(WatchDecoder, RejectsGarbage) {
    const std::vector<std::string> bad = {
        "not json\n",
        "{\"type\":\"ADDED\",\"object\":{}}}\n",  // stray closing brace
        "{\"type\":\"FOO\",\"object\":{}}\n",
        "{\"type\":\"ADDED\"}\n",
        "{\"type\":\"ADDED\",\"object\":\"str\"}\n",
        "{\"object\":{}}\n",
        "{\"type\":7,\"object\":{}}\n",
        "[1,2]\n",
        "42\n",
        "\"ADDED\"\n",
        "{\"type\":\"ADDED\",\"object\":{\"a\":tru}}\n",
        "<html>502 Bad Gateway</html>\n",
    };
    for (const auto& b : bad) {
        proto::WatchDecoder d;
        d.feed(b);
        std::optional<ks::Error> err;
        for (int i = 0; i < 4 && !err; ++i) {
            auto ev = d.next();
            if (!ev) err = ev.error();
            else if (!*ev) break;
        }
        ASSERT_TRUE(err) << b;
        EXPECT_TRUE(err->is(errc::invalid_response)) << b;
        // Errors are sticky: the stream cannot recover.
        d.feed("{\"type\":\"ADDED\",\"object\":{}}\n");
        auto again = d.next();
        ASSERT_FALSE(again) << b;
        EXPECT_TRUE(again.error().is(errc::invalid_response));
    }
}

TEST(WatchDecoder, EnforcesMaxEventSize) {
    proto::WatchDecoder d(64);
    std::string big = "{\"type\":\"ADDED\",\"object\":{\"pad\":\"" + std::string(100, 'x') + "\"}}\n";
    // Fed in small pieces, the limit trips before the event completes.
    std::optional<ks::Error> err;
    for (std::size_t i = 0; i < big.size() && !err; i += 10) {
        d.feed(std::string_view(big).substr(i, 10));
        auto ev = d.next();
        if (!ev) err = ev.error();
        else EXPECT_FALSE(*ev);
    }
    ASSERT_TRUE(err);
    EXPECT_TRUE(err->is(errc::invalid_response));
    EXPECT_NE(err->message.find("larger than 64 bytes"), std::string::npos) << err->message;

    // An event within the limit passes, and limits are per event, not per stream.
    proto::WatchDecoder ok(64);
    std::string small = "{\"type\":\"ADDED\",\"object\":{\"a\":1}}\n";
    std::vector<Seen> got;
    for (int i = 0; i < 10; ++i) ok.feed(small);
    drain(ok, got);
    EXPECT_EQ(got.size(), 10u);
}
