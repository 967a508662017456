// Shared helpers: RFC 3339 times, tolerant JSON access, random names, the logger.
#include <kubesandbox/error.hpp>
#include <kubesandbox/logger.hpp>

#include "util/json_access.hpp"
#include "util/random.hpp"
#include "util/time_format.hpp"

#include <gtest/gtest.h>
#include <boost/json/parse.hpp>

#include <vector>

namespace {
using namespace kubesandbox;
using namespace std::chrono_literals;

TEST(TimeFormat, RoundTripsAndRejectsGarbage) {
    auto t = util::parse_rfc3339("2026-11-24T14:28:48.123Z");
    ASSERT_TRUE(t);
    EXPECT_EQ(util::format_rfc3339(*t, true), "2026-11-24T14:28:48.123Z");
    EXPECT_EQ(util::format_rfc3339(*t), "2026-11-24T14:28:48Z");
    auto offset = util::parse_rfc3339("2026-11-24T16:28:48+02:00");
    ASSERT_TRUE(offset);
    EXPECT_EQ(util::format_rfc3339(*offset), "2026-11-24T14:28:48Z");
    EXPECT_TRUE(util::parse_rfc3339("2026-11-24T14:28:48"));
    EXPECT_FALSE(util::parse_rfc3339("yesterday"));
    EXPECT_FALSE(util::parse_rfc3339("2026-11-24T14:28:48Zjunk"));
    EXPECT_FALSE(util::parse_rfc3339("2026-11-24T14:28:48+0"));
    EXPECT_FALSE(util::parse_rfc3339("9999-01-01T00:00:00Z"));  // past what system_clock holds
    EXPECT_FALSE(util::parse_rfc3339("0001-01-01T00:00:00Z"));  // Go's zero time: no overflow either
    EXPECT_EQ(util::parse_decimal("600"), 600);
    EXPECT_FALSE(util::parse_decimal("-1"));
    EXPECT_FALSE(util::parse_decimal("1e9"));
    EXPECT_FALSE(util::parse_decimal("99999999999999999999"));
}

TEST(JsonAccess, MissingAndMistypedFieldsReadEmpty) {
    auto o = boost::json::parse(R"({"metadata":{"name":7,"labels":{"a":"b"},"annotations":[]},"n":-3})").as_object();
    EXPECT_EQ(util::string_at(util::metadata_of(o), "name"), "");
    EXPECT_EQ(util::label_of(o, "a"), "b");
    EXPECT_EQ(util::annotation_of(o, "a"), "");
    EXPECT_EQ(util::int_at(&o, "n"), -3);
    EXPECT_FALSE(util::int_at(nullptr, "n"));
    EXPECT_EQ(util::object_at(o, "n"), nullptr);
    boost::json::object empty;
    EXPECT_TRUE(util::metadata_of(empty).empty());
}

TEST(Random, HexAndAlphabet) {
    auto h = util::random_hex(16);
    EXPECT_EQ(h.size(), 32u);
    EXPECT_EQ(h.find_first_not_of("0123456789abcdef"), std::string::npos);
    EXPECT_NE(util::random_hex(16), h);
    auto s = util::random_string("xy", 50);
    EXPECT_EQ(s.find_first_not_of("xy"), std::string::npos);
    EXPECT_EQ(util::sha256_hex("abc", 8), "ba7816bf");
}

TEST(Logger, FiltersByLevelAndUsesTheSink) {
    std::vector<std::pair<LogLevel, std::string>> lines;
    Logger log(LogLevel::warning, [&](LogLevel l, std::string_view m) { lines.emplace_back(l, std::string(m)); });
    log.info("hidden");
    log.warning("shown");
    log.log(LogLevel::error, "also");
    ASSERT_EQ(lines.size(), 2u);
    EXPECT_EQ(lines[0].first, LogLevel::warning);
    EXPECT_EQ(lines[0].second, "shown");
    EXPECT_EQ(to_string(lines[1].first), "error");
    Logger::silent().warning("nothing happens");
}

}  // namespace

namespace {
using namespace kubesandbox;

TEST(ErrorClassification, PermanentAndUnknownOutcomes) {
    EXPECT_TRUE(make_error(errc::tls_error, "x").is_permanent());
    EXPECT_TRUE(make_error(errc::invalid_config, "x").is_permanent());
    EXPECT_FALSE(make_error(errc::connection_failed, "x").is_permanent());
    EXPECT_FALSE(make_error(errc::timeout, "x").is_permanent());
    EXPECT_TRUE(make_error(errc::timeout, "x").outcome_unknown());
    EXPECT_TRUE(make_error(errc::connection_closed, "x").outcome_unknown());
    EXPECT_TRUE(make_error(errc::service_unavailable, "x").outcome_unknown());
    EXPECT_FALSE(make_error(errc::connection_failed, "x").outcome_unknown());  // nothing was sent
    EXPECT_FALSE(make_error(errc::conflict, "x").outcome_unknown());
    // Lower-layer codes are neither: the caller decides from what it was doing.
    auto reset = make_error(boost::system::errc::make_error_code(boost::system::errc::connection_reset), "x");
    EXPECT_FALSE(reset.is_permanent());
    EXPECT_FALSE(reset.outcome_unknown());
}

}  // namespace
