#include "proto/label_selector.hpp"

#include <gtest/gtest.h>

#include <boost/json/parse.hpp>

namespace ks = kubesandbox;
using ks::errc;
using ks::proto::FieldSelector;
using ks::proto::LabelRequirement;
using ks::proto::LabelSelector;
using Op = LabelRequirement::Op;

namespace {

using Labels = std::map<std::string, std::string>;

struct MatchCase {
    const char* selector;
    Labels labels;
    bool expected;
};

}  // namespace

TEST(LabelSelector, MatchesEveryForm) {
    const std::vector<MatchCase> cases = {
        {"", {}, true},
        {"   ", {{"a", "b"}}, true},
        {"app=web", {{"app", "web"}}, true},
        {"app=web", {{"app", "db"}}, false},
        {"app=web", {}, false},
        {"app==web", {{"app", "web"}}, true},
        {"app==web", {{"app", "webx"}}, false},
        {"app!=web", {{"app", "db"}}, true},
        {"app!=web", {}, true},
        {"app!=web", {{"app", "web"}}, false},
        {"app=", {{"app", ""}}, true},
        {"app=", {{"app", "x"}}, false},
        {"app=", {}, false},
        {"tier in (a,b)", {{"tier", "b"}}, true},
        {"tier in (a,b)", {{"tier", "c"}}, false},
        {"tier in (a,b)", {}, false},
        {"tier in ( a , b )", {{"tier", "a"}}, true},
        {"tier notin (a,b)", {{"tier", "c"}}, true},
        {"tier notin (a,b)", {}, true},
        {"tier notin (a,b)", {{"tier", "a"}}, false},
        {"tier in (a,)", {{"tier", ""}}, true},
        {"tier in ()", {{"tier", ""}}, true},
        {"deprecated", {{"deprecated", ""}}, true},
        {"deprecated", {}, false},
        {"!deprecated", {}, true},
        {"!deprecated", {{"deprecated", "x"}}, false},
        {"replicas>5", {{"replicas", "6"}}, true},
        {"replicas>5", {{"replicas", "5"}}, false},
        {"replicas>5", {{"replicas", "abc"}}, false},
        {"replicas>5", {}, false},
        {"replicas<5", {{"replicas", "-3"}}, true},
        {"replicas<5", {{"replicas", "7"}}, false},
        {"app=sandbox,tier in (a,b),!deprecated", {{"app", "sandbox"}, {"tier", "a"}}, true},
        {"app=sandbox,tier in (a,b),!deprecated", {{"app", "sandbox"}, {"tier", "a"}, {"deprecated", "1"}}, false},
        {" app = sandbox , tier  notin(x) ", {{"app", "sandbox"}, {"tier", "a"}}, true},
        {"example.com/owner=me", {{"example.com/owner", "me"}}, true},
        {"in=notin", {{"in", "notin"}}, true},  // keywords are identifiers in value position
        {"app in (in,notin)", {{"app", "notin"}}, true},
    };
    for (const auto& c : cases) {
        auto sel = LabelSelector::parse(c.selector);
        ASSERT_TRUE(sel) << c.selector << ": " << sel.error().message;
        EXPECT_EQ(sel->matches(c.labels), c.expected) << c.selector;
        boost::json::object obj;
        for (auto& [k, v] : c.labels) obj[k] = v;
        EXPECT_EQ(sel->matches(&obj), c.expected) << c.selector << " (json)";
        if (c.labels.empty()) {
            EXPECT_EQ(sel->matches(nullptr), c.expected) << c.selector << " (null)";
        }
    }
}

TEST(LabelSelector, ParsesRequirements) {
    auto sel = LabelSelector::parse("z=1,a in (c,b,c),!m,k,n!=2,g>3,l<4");
    ASSERT_TRUE(sel);
    const auto& r = sel->requirements();
    ASSERT_EQ(r.size(), 7u);
    // Sorted by key, values sorted and deduplicated.
    EXPECT_EQ(r[0].key, "a");
    EXPECT_EQ(r[0].op, Op::in);
    EXPECT_EQ(r[0].values, (std::vector<std::string>{"b", "c"}));
    EXPECT_EQ(r[1].key, "g");
    EXPECT_EQ(r[1].op, Op::greater_than);
    EXPECT_EQ(r[2].key, "k");
    EXPECT_EQ(r[2].op, Op::exists);
    EXPECT_TRUE(r[2].values.empty());
    EXPECT_EQ(r[3].op, Op::less_than);
    EXPECT_EQ(r[4].key, "m");
    EXPECT_EQ(r[4].op, Op::not_exists);
    EXPECT_EQ(r[5].op, Op::not_equals);
    EXPECT_EQ(r[6].key, "z");
    EXPECT_EQ(r[6].op, Op::equals);
    EXPECT_FALSE(sel->empty());
    EXPECT_TRUE(LabelSelector::parse("")->empty());
    EXPECT_EQ(sel->to_string(), "a in (b,c),g>3,k,l<4,!m,n!=2,z=1");
}

TEST(LabelSelector, RejectsMalformedWithApimachineryMessages) {
    struct ErrCase {
        const char* selector;
        const char* message;  // exact, or a prefix when ending in '*'
    };
    const std::vector<ErrCase> cases = {
        {"a b", "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"},
        {"a=b c", "found 'c', expected: ',' or 'end of string'"},
        {"a=b,", "found '', expected: identifier after ','"},
        {",a", "found ',', expected: !, identifier, or 'end of string'"},
        {"=a", "found '=', expected: !, identifier, or 'end of string'"},
        {"a in b", "unable to parse requirement: found 'b' expected: '('"},
        {"a in (b", "unable to parse requirement: found '', expected: ',' or ')'"},
        {"a in (b c)", "unable to parse requirement: found 'c', expected: ',' or ')'"},
        {"a in (=)", "unable to parse requirement: found '=', expected: ',', ')' or identifier"},
        {"a=(b)", "unable to parse requirement: found '(', expected: identifier"},
        {"!a=b", "found '=', expected: ',' or 'end of string'"},
        {"!", "unable to parse requirement: found '', expected: identifier"},
        {"a>b",
         "unable to parse requirement: values[0]: Invalid value: \"b\": for 'Gt', 'Lt' operators, "
         "the value must be an integer"},
        {"a/b/c=d", "unable to parse requirement: key: Invalid value: \"a/b/c\": a qualified name must*"},
        {"-a=b", "unable to parse requirement: key: Invalid value: \"-a\": name part must consist of*"},
        {"a=b_", "unable to parse requirement: values[0][a]: Invalid value: \"b_\": a valid label must be*"},
        {"a in (x,b_)", "unable to parse requirement: values[0][a]: Invalid value: \"b_\": *"},
    };
    for (const auto& c : cases) {
        auto sel = LabelSelector::parse(c.selector);
        ASSERT_FALSE(sel) << c.selector;
        EXPECT_TRUE(sel.error().is(errc::bad_request)) << c.selector;
        std::string want = c.message;
        if (!want.empty() && want.back() == '*') {
            want.pop_back();
            EXPECT_EQ(sel.error().message.substr(0, want.size()), want) << c.selector;
        } else {
            EXPECT_EQ(sel.error().message, want) << c.selector;
        }
    }
    // A 64-character value is too long.
    auto long_value = LabelSelector::parse("a=" + std::string(64, 'x'));
    ASSERT_FALSE(long_value);
    EXPECT_NE(long_value.error().message.find("must be no more than 63 characters"), std::string::npos);
}

TEST(LabelSelector, FormatsMapsSortedByKey) {
    EXPECT_EQ(ks::proto::format_label_selector({{"b", "2"}, {"a", "1"}}), "a=1,b=2");
    EXPECT_EQ(ks::proto::format_label_selector({}), "");
    auto sel = LabelSelector::parse(ks::proto::format_label_selector({{"app", "x"}, {"t", "y"}}));
    ASSERT_TRUE(sel);
    EXPECT_TRUE(sel->matches(Labels{{"app", "x"}, {"t", "y"}, {"other", "z"}}));
    EXPECT_FALSE(sel->matches(Labels{{"app", "x"}}));
}

TEST(FieldSelector, ParsesAndMatches) {
    auto pod = boost::json::parse(R"({"metadata":{"name":"p1","namespace":"ns"},
        "spec":{"nodeName":"n1","hostNetwork":false},"status":{"phase":"Running"}})")
                   .as_object();
    struct Case {
        const char* selector;
        bool expected;
    };
    const std::vector<Case> cases = {
        {"", true},
        {"metadata.name=p1", true},
        {"metadata.name==p1", true},
        {"metadata.name=p2", false},
        {"metadata.name!=p2", true},
        {"metadata.name!=p1", false},
        {"metadata.name=p1,status.phase=Running", true},
        {"metadata.name=p1,status.phase!=Running", false},
        {"spec.nodeName=", false},
        {"status.podIP=", true},  // missing field compares as ""
        {"spec.hostNetwork=false", true},
    };
    for (const auto& c : cases) {
        auto sel = FieldSelector::parse(c.selector);
        ASSERT_TRUE(sel) << c.selector << ": " << sel.error().message;
        EXPECT_EQ(sel->matches(pod), c.expected) << c.selector;
    }
    auto sel = FieldSelector::parse("metadata.name!=a\\,b\\=c\\\\d");
    ASSERT_TRUE(sel);
    ASSERT_EQ(sel->requirements().size(), 1u);
    EXPECT_EQ(sel->requirements()[0].field, "metadata.name");
    EXPECT_FALSE(sel->requirements()[0].equals);
    EXPECT_EQ(sel->requirements()[0].value, "a,b=c\\d");
}

TEST(FieldSelector, RejectsSyntaxErrors) {
    const std::vector<std::pair<const char*, const char*>> cases = {
        {"metadata.name", "invalid selector: 'metadata.name'; can't understand 'metadata.name'"},
        {"a=b,c", "invalid selector: 'a=b,c'; can't understand 'c'"},
        {"a=b=c", "invalid field selector: unescaped character in value: '='"},
        {"a=b\\x", "invalid field selector: invalid escape sequence: \\x"},
        {"a=b\\", "invalid field selector: invalid escape sequence: \\"},
    };
    for (auto& [text, message] : cases) {
        auto sel = FieldSelector::parse(text);
        ASSERT_FALSE(sel) << text;
        EXPECT_TRUE(sel.error().is(errc::bad_request)) << text;
        EXPECT_EQ(sel.error().message, message) << text;
    }
}

TEST(FieldSelector, ChecksSupportedFields) {
    auto sel = FieldSelector::parse("metadata.name=a,spec.foo=b");
    ASSERT_TRUE(sel);
    auto ok = sel->check_supported({"metadata.name", "spec.foo"});
    EXPECT_TRUE(ok);
    auto bad = sel->check_supported({"metadata.name", "metadata.namespace"});
    ASSERT_FALSE(bad);
    EXPECT_TRUE(bad.error().is(errc::bad_request));
    EXPECT_EQ(bad.error().message, "field label not supported: spec.foo");
}
