#include "proto/status.hpp"

#include <gtest/gtest.h>

#include <boost/json/serialize.hpp>

namespace ks = kubesandbox;
using ks::errc;

TEST(Status, DecodesJsonStatusWithCauses) {
    const std::string body = R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
      "message":"Pod \"Bad_Name\" is invalid: metadata.name: Invalid value","reason":"Invalid",
      "details":{"name":"Bad_Name","kind":"Pod","causes":[{"reason":"FieldValueInvalid",
      "message":"Invalid value: \"Bad_Name\"","field":"metadata.name"}]},"code":422})";
    auto e = ks::proto::error_from_response(422, "application/json", body);
    EXPECT_TRUE(e.is(errc::invalid));
    EXPECT_EQ(e.http_status, 422u);
    EXPECT_EQ(e.reason, "Invalid");
    ASSERT_EQ(e.causes.size(), 1u);
    EXPECT_EQ(e.causes[0].field, "metadata.name");
    EXPECT_EQ(e.causes[0].reason, "FieldValueInvalid");
    EXPECT_NE(e.message.find("is invalid"), std::string::npos);
}

TEST(Status, ReasonDistinguishesConflictFromAlreadyExists) {
    auto exists = ks::proto::error_from_response(
        409, "application/json",
        R"({"kind":"Status","status":"Failure","reason":"AlreadyExists","message":"x","code":409})");
    auto conflict = ks::proto::error_from_response(
        409, "application/json",
        R"({"kind":"Status","status":"Failure","reason":"Conflict","message":"x","code":409})");
    EXPECT_TRUE(exists.is(errc::already_exists));
    EXPECT_TRUE(conflict.is(errc::conflict));
}

TEST(Status, ExpiredContinueIsTyped) {
    auto e = ks::proto::error_from_response(
        410, "application/json",
        R"({"kind":"Status","status":"Failure","reason":"Expired","message":"too old","code":410})");
    EXPECT_TRUE(e.is(errc::expired));
}

TEST(Status, PlainTextTooManyRequestsKeepsTextAndRetryAfter) {
    auto e = ks::proto::error_from_response(429, "text/plain; charset=utf-8",
                                            "Too many requests, please try again later.\n", "3");
    EXPECT_TRUE(e.is(errc::too_many_requests));
    EXPECT_EQ(e.message, "Too many requests, please try again later.");
    ASSERT_TRUE(e.retry_after.has_value());
    EXPECT_EQ(e.retry_after->count(), 3);
    EXPECT_EQ(e.reason, "TooManyRequests");
}

TEST(Status, GarbageJsonBodyStillTyped) {
    auto e = ks::proto::error_from_response(500, "application/json", "{not json");
    EXPECT_TRUE(e.is(errc::internal_error));
    EXPECT_EQ(e.message, "{not json");
}

TEST(Status, UnknownStatusWithoutReason) {
    auto e = ks::proto::error_from_response(418, "", "");
    EXPECT_TRUE(e.is(errc::unknown_status));
    EXPECT_EQ(e.message, "HTTP 418");
    auto e5 = ks::proto::error_from_response(599, "", "");
    EXPECT_TRUE(e5.is(errc::internal_error));
}

TEST(Status, HugeTextBodyIsTruncated) {
    std::string body(100000, 'x');
    auto e = ks::proto::error_from_response(503, "text/plain", body);
    EXPECT_TRUE(e.is(errc::service_unavailable));
    EXPECT_LT(e.message.size(), 2000u);
}

TEST(Status, RetryAfterParsing) {
    EXPECT_EQ(ks::proto::parse_retry_after(" 7 ")->count(), 7);
    EXPECT_FALSE(ks::proto::parse_retry_after("soon"));
    EXPECT_FALSE(ks::proto::parse_retry_after("-1"));
    EXPECT_FALSE(ks::proto::parse_retry_after(""));
}

TEST(Status, BuildsWhatItDecodes) {
    ks::proto::StatusDetails d;
    d.name = "p";
    d.kind = "pods";
    d.causes.push_back({"FieldValueRequired", "Required value", "spec.containers"});
    auto st = ks::proto::make_status(404, "NotFound", "pods \"p\" not found", d);
    auto text = boost::json::serialize(st);
    auto e = ks::proto::error_from_response(404, "application/json", text);
    EXPECT_TRUE(e.is(errc::not_found));
    EXPECT_EQ(e.message, "pods \"p\" not found");
    ASSERT_EQ(e.causes.size(), 1u);
    EXPECT_EQ(e.causes[0].field, "spec.containers");
}

TEST(Error, DescribeNamesCodeAndStatus) {
    auto e = ks::proto::error_from_response(
        404, "application/json",
        R"({"kind":"Status","status":"Failure","reason":"NotFound","message":"pods \"x\" not found","code":404})");
    EXPECT_EQ(e.describe(), "not found: pods \"x\" not found (HTTP 404 NotFound)");
    boost::system::error_code ec = errc::timeout;
    EXPECT_EQ(ec.category().name(), std::string("kubesandbox"));
}

TEST(Status, WatchErrorEventWith410IsExpiredWhateverTheReason) {
    for (const char* reason : {"Expired", "Gone", ""}) {
        boost::json::object st = ks::proto::make_status(410, reason, "too old resource version: 1 (5)");
        auto e = ks::proto::error_from_watch_status(st);
        EXPECT_TRUE(e.is(errc::expired)) << reason << ": " << e.describe();
        EXPECT_EQ(e.http_status, 410u);
        EXPECT_EQ(e.message, "too old resource version: 1 (5)");
    }
}

TEST(Status, WatchErrorEventOtherCodesAreTypedFromTheStatus) {
    auto internal = ks::proto::error_from_watch_status(ks::proto::make_status(500, "InternalError", "etcd is sad"));
    EXPECT_TRUE(internal.is(errc::internal_error));
    EXPECT_EQ(internal.reason, "InternalError");
    EXPECT_EQ(internal.message, "etcd is sad");
    auto forbidden = ks::proto::error_from_watch_status(ks::proto::make_status(403, "Forbidden", "no"));
    EXPECT_TRUE(forbidden.is(errc::forbidden));
    // Not a Status at all: still a typed error, never an empty message.
    boost::json::object junk;
    junk["what"] = 1;
    auto odd = ks::proto::error_from_watch_status(junk);
    EXPECT_TRUE(odd.is(errc::unknown_status)) << odd.describe();
    EXPECT_FALSE(odd.message.empty());
}
