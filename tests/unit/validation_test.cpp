#include "proto/validation.hpp"

#include <gtest/gtest.h>

#include <boost/json/parse.hpp>

#include <set>

namespace ks = kubesandbox;
namespace proto = ks::proto;

namespace {
const std::string subdomain_msg =
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
    "must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const std::string label_msg =
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
    "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const std::string dns1035_msg =
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
    "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for "
    "validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
const std::string value_msg =
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and "
    "must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex "
    "used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const std::string name_part_msg =
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
}  // namespace

TEST(Validation, NameRulesAcceptAndReject) {
    struct Case {
        std::string value;
        bool subdomain, label, dns1035;
    };
    const std::vector<Case> cases = {
        {"abc", true, true, true},
        {"a-b.c", true, false, false},
        {"1abc", true, true, false},
        {"abc-", false, false, false},
        {"-abc", false, false, false},
        {"Abc", false, false, false},
        {"a_b", false, false, false},
        {"", false, false, false},
        {"a..b", false, false, false},
        {std::string(63, 'a'), true, true, true},
        {std::string(64, 'a'), true, false, false},
    };
    for (const auto& c : cases) {
        EXPECT_EQ(proto::validate_dns1123_subdomain(c.value).empty(), c.subdomain) << c.value;
        EXPECT_EQ(proto::validate_dns1123_label(c.value).empty(), c.label) << c.value;
        EXPECT_EQ(proto::validate_dns1035_label(c.value).empty(), c.dns1035) << c.value;
    }
    EXPECT_TRUE(proto::validate_dns1123_subdomain(std::string(253, 'a')).empty());
    auto too_long = proto::validate_dns1123_subdomain(std::string(254, 'a'));
    ASSERT_EQ(too_long.size(), 1u);
    EXPECT_EQ(too_long[0], "must be no more than 253 characters");
}

TEST(Validation, ExactApimachineryMessages) {
    EXPECT_EQ(proto::validate_dns1123_subdomain("Bad_Name"), std::vector<std::string>{subdomain_msg});
    EXPECT_EQ(proto::validate_dns1123_label("x.y"), std::vector<std::string>{label_msg});
    EXPECT_EQ(proto::validate_dns1035_label("1ab"), std::vector<std::string>{dns1035_msg});
    EXPECT_EQ(proto::validate_label_value("-x"), std::vector<std::string>{value_msg});
    auto long_label = proto::validate_dns1123_label(std::string(64, '-'));
    EXPECT_EQ(long_label, (std::vector<std::string>{"must be no more than 63 characters", label_msg}));
}

TEST(Validation, QualifiedNames) {
    EXPECT_TRUE(proto::validate_qualified_name("app").empty());
    EXPECT_TRUE(proto::validate_qualified_name("app.kubernetes.io/name").empty());
    EXPECT_TRUE(proto::validate_qualified_name("My_Key.1").empty());
    EXPECT_EQ(proto::validate_qualified_name("-bad"), std::vector<std::string>{name_part_msg});
    EXPECT_EQ(proto::validate_qualified_name("/x"), std::vector<std::string>{"prefix part must be non-empty"});
    EXPECT_EQ(proto::validate_qualified_name("x/"),
              (std::vector<std::string>{"name part must be non-empty", name_part_msg}));
    EXPECT_EQ(proto::validate_qualified_name("Ex.com/x"), std::vector<std::string>{"prefix part " + subdomain_msg});
    EXPECT_EQ(proto::validate_qualified_name(std::string(64, 'k')),
              std::vector<std::string>{"name part must be no more than 63 characters"});
    auto three = proto::validate_qualified_name("a/b/c");
    ASSERT_EQ(three.size(), 1u);
    EXPECT_EQ(three[0].rfind("a qualified name must consist of", 0), 0u);
    EXPECT_NE(three[0].find("with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"),
              std::string::npos);
}

TEST(Validation, LabelValues) {
    EXPECT_TRUE(proto::is_valid_label_value(""));
    EXPECT_TRUE(proto::is_valid_label_value("a"));
    EXPECT_TRUE(proto::is_valid_label_value("A-b_c.1"));
    EXPECT_TRUE(proto::is_valid_label_value(std::string(63, 'v')));
    EXPECT_FALSE(proto::is_valid_label_value(std::string(64, 'v')));
    EXPECT_FALSE(proto::is_valid_label_value("a b"));
    EXPECT_FALSE(proto::is_valid_label_value("a-"));
    EXPECT_EQ(proto::validate_label_value(std::string(64, 'v')),
              std::vector<std::string>{"must be no more than 63 characters"});
}

TEST(Validation, SanitizeLabelValue) {
    EXPECT_EQ(proto::sanitize_label_value("already-valid"), "already-valid");
    EXPECT_EQ(proto::sanitize_label_value(""), "");
    const std::vector<std::string> inputs = {
        "user@example.com", "-leading", "trailing-", "with space", std::string(200, 'x'), "!!!",
        "ünïcode",          "a/b/c",    "_x_"};
    std::set<std::string> seen;
    for (const auto& in : inputs) {
        auto out = proto::sanitize_label_value(in);
        EXPECT_TRUE(proto::is_valid_label_value(out)) << in << " -> " << out;
        EXPECT_FALSE(out.empty()) << in;
        EXPECT_LE(out.size(), 63u);
        EXPECT_EQ(proto::sanitize_label_value(in), out);  // deterministic
        seen.insert(out);
    }
    EXPECT_EQ(seen.size(), inputs.size());
    auto email = proto::sanitize_label_value("user@example.com");
    EXPECT_EQ(email.rfind("user-example.com-", 0), 0u) << email;
    EXPECT_EQ(email.size(), std::string("user-example.com-").size() + 10);
    // SHA-256("user@example.com") starts with b4c9a289323b.
    EXPECT_EQ(email.substr(email.size() - 10), "b4c9a28932");
}

TEST(Validation, ObjectMetaInvalidName) {
    auto meta = boost::json::parse(R"({"name":"Bad_Name"})").as_object();
    auto causes = proto::validate_object_meta(meta, proto::NameRule::dns1123_subdomain, true);
    ASSERT_EQ(causes.size(), 1u);
    EXPECT_EQ(causes[0].reason, "FieldValueInvalid");
    EXPECT_EQ(causes[0].field, "metadata.name");
    EXPECT_EQ(causes[0].message, "Invalid value: \"Bad_Name\": " + subdomain_msg);
    EXPECT_EQ(proto::invalid_message("Pod", "Bad_Name", causes),
              "Pod \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\": " + subdomain_msg);
}

TEST(Validation, ObjectMetaRequiredAndGenerateName) {
    boost::json::object empty;
    auto causes = proto::validate_object_meta(empty, proto::NameRule::dns1123_label, true);
    ASSERT_EQ(causes.size(), 1u);
    EXPECT_EQ(causes[0], (ks::StatusCause{"FieldValueRequired", "Required value: name or generateName is required",
                                          "metadata.name"}));
    EXPECT_TRUE(proto::validate_object_meta(empty, proto::NameRule::dns1123_label, false).empty());

    auto gen = boost::json::parse(R"({"generateName":"sbx-"})").as_object();
    EXPECT_TRUE(proto::validate_object_meta(gen, proto::NameRule::dns1035_label, true).empty());
    auto bad_gen = boost::json::parse(R"({"generateName":"Sbx-"})").as_object();
    auto c2 = proto::validate_object_meta(bad_gen, proto::NameRule::dns1035_label, true);
    ASSERT_EQ(c2.size(), 1u);
    EXPECT_EQ(c2[0].field, "metadata.generateName");

    auto dot = boost::json::parse(R"({"name":".."})").as_object();
    auto c3 = proto::validate_object_meta(dot, proto::NameRule::dns1123_subdomain, true);
    ASSERT_EQ(c3.size(), 2u);
    EXPECT_EQ(c3[1].message, "Invalid value: \"..\": may not be '..'");
}

TEST(Validation, ObjectMetaLabelsAndAnnotations) {
    auto meta = boost::json::parse(
                    R"({"name":"ok","labels":{"good":"v","bad key":"v","k":"bad value"},
                        "annotations":{"Example.com/Upper":"fine","a/b/c":"x"}})")
                    .as_object();
    auto causes = proto::validate_object_meta(meta, proto::NameRule::dns1123_subdomain, true);
    ASSERT_EQ(causes.size(), 3u);
    EXPECT_EQ(causes[0].field, "metadata.labels");
    EXPECT_EQ(causes[0].message, "Invalid value: \"bad key\": " + name_part_msg);
    EXPECT_EQ(causes[1].field, "metadata.labels");
    EXPECT_EQ(causes[1].message, "Invalid value: \"bad value\": " + value_msg);
    EXPECT_EQ(causes[2].field, "metadata.annotations");
    EXPECT_EQ(causes[2].message.rfind("Invalid value: \"a/b/c\": a qualified name", 0), 0u);
    auto msg = proto::invalid_message("Sandbox.agents.x-k8s.io", "ok", causes);
    EXPECT_EQ(msg.rfind("Sandbox.agents.x-k8s.io \"ok\" is invalid: [metadata.labels: Invalid value: \"bad key\"", 0),
              0u);
    EXPECT_EQ(msg.back(), ']');

    boost::json::object big{{"name", "ok"}};
    big["annotations"] = boost::json::object{{"a", std::string(262144, 'x')}};
    auto c2 = proto::validate_object_meta(big, proto::NameRule::dns1123_subdomain, true);
    ASSERT_EQ(c2.size(), 1u);
    EXPECT_EQ(c2[0], (ks::StatusCause{"FieldValueTooLong", "Too long: may not be more than 262144 bytes",
                                      "metadata.annotations"}));
    EXPECT_EQ(proto::invalid_message("Pod", "ok", c2),
              "Pod \"ok\" is invalid: metadata.annotations: Too long: may not be more than 262144 bytes");
}

TEST(Validation, GenerateName) {
    const std::string alphabet = "bcdfghjklmnpqrstvwxz2456789";
    auto n = proto::generate_name("sbx-");
    ASSERT_EQ(n.size(), 9u);
    EXPECT_EQ(n.substr(0, 4), "sbx-");
    for (char c : n.substr(4)) EXPECT_NE(alphabet.find(c), std::string::npos) << n;
    auto long_name = proto::generate_name(std::string(100, 'p'));
    EXPECT_EQ(long_name.size(), 63u);
    EXPECT_TRUE(proto::validate_dns1123_label(long_name).empty());
    EXPECT_NE(proto::generate_name("x-"), proto::generate_name("x-"));  // 27^5 space; collision ~7e-8
}

TEST(Validation, GoQuote) {
    EXPECT_EQ(proto::go_quote("a\"b\\c\n"), "\"a\\\"b\\\\c\\n\"");
    EXPECT_EQ(proto::go_quote("\x01"), "\"\\x01\"");
    EXPECT_EQ(proto::go_quote("ü"), "\"ü\"");
    EXPECT_EQ(proto::go_quote("\xff"), "\"\\xff\"");
}
