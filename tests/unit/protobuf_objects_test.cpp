// The local API server's protobuf decoding of the few kinds clients send that way.
#include "local/protobuf_objects.hpp"

#include <boost/json.hpp>

#include <gtest/gtest.h>

#include <string>

namespace {

namespace json = boost::json;
using kubesandbox::local::decode_protobuf_object;

// One length-delimited field (every length and field number here is below 128: one byte each).
std::string field(int number, const std::string& bytes) {
    return std::string(1, static_cast<char>(number << 3 | 2)) + static_cast<char>(bytes.size()) + bytes;
}
std::string varint_field(int number, int value) {
    return std::string(1, static_cast<char>(number << 3)) + static_cast<char>(value);
}

std::string envelope(const std::string& kind, const std::string& raw) {
    return std::string("k8s\0", 4) + field(1, field(1, "v1") + field(2, kind)) + field(2, raw);
}

TEST(ProtobufObjects, AConfigMapDecodesWhateverTheOrderOfItsFields) {
    // data and immutable before metadata, and metadata twice: protobuf allows both, and each
    // adds keys to the object while its metadata is being filled in.
    std::string raw = field(2, field(1, "k") + field(2, "v")) + varint_field(4, 1) + field(1, field(1, "cm")) +
                      field(2, field(1, "k2") + field(2, "v2")) + field(1, field(3, "ns"));
    auto o = decode_protobuf_object(envelope("ConfigMap", raw));
    ASSERT_TRUE(o) << o.error().describe();
    EXPECT_EQ(o->at("kind"), "ConfigMap");
    EXPECT_EQ(o->at("metadata").at("name"), "cm");
    EXPECT_EQ(o->at("metadata").at("namespace"), "ns");
    EXPECT_EQ(o->at("data").at("k"), "v");
    EXPECT_EQ(o->at("data").at("k2"), "v2");
    EXPECT_EQ(o->at("immutable"), true);
}

TEST(ProtobufObjects, BadBodiesAreTypedErrors) {
    EXPECT_FALSE(decode_protobuf_object("not protobuf"));
    auto truncated = envelope("ConfigMap", field(1, field(1, "cm")));
    truncated.resize(truncated.size() - 2);
    EXPECT_FALSE(decode_protobuf_object(truncated));
    auto other = decode_protobuf_object(envelope("Pod", field(1, field(1, "p"))));
    EXPECT_TRUE(!other && other.error().is(kubesandbox::errc::unsupported_media_type));
}

}  // namespace
