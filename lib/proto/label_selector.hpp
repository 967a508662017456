// Label and field selectors (list/watch query parameters): parsing with apimachinery's grammar
// and messages, and matching against objects. Sans-IO.
#pragma once

#include <kubesandbox/error.hpp>

#include <boost/json/object.hpp>

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace kubesandbox::proto {

struct LabelRequirement {
    enum class Op { equals, not_equals, in, not_in, exists, not_exists, greater_than, less_than };
    std::string key;
    Op op;
    std::vector<std::string> values;  // sorted, without duplicates
};

class LabelSelector {
public:
    // k=v, k==v, k!=v, k in (a,b), k notin (a,b), k, !k, k>5, k<5; comma = AND. Keys and values
    // are validated; errors are errc::bad_request ("unable to parse requirement: ...").
    static Result<LabelSelector> parse(std::string_view text);
    bool matches(const boost::json::object* labels) const;  // labels may be null (no labels)
    bool matches(const std::map<std::string, std::string>& labels) const;
    bool empty() const;  // matches everything
    const std::vector<LabelRequirement>& requirements() const;
    // Canonical text (apimachinery's String()): requirements joined by ','.
    std::string to_string() const;

private:
    std::vector<LabelRequirement> requirements_;
};

struct FieldRequirement {
    std::string field;
    bool equals;
    std::string value;
};

class FieldSelector {
public:
    // =, ==, != ; comma = AND; backslash escapes \ , = in values. errc::bad_request on syntax error.
    static Result<FieldSelector> parse(std::string_view text);
    // An unknown field -> errc::bad_request "field label not supported: <field>".
    Result<void> check_supported(const std::vector<std::string_view>& supported) const;
    // Fields are dotted paths into the object (metadata.name, status.phase...); missing = "".
    bool matches(const boost::json::object& object) const;
    bool empty() const;
    const std::vector<FieldRequirement>& requirements() const;

private:
    std::vector<FieldRequirement> requirements_;
};

// The value a field selector compares for `path` (strings as-is, bools/numbers as text, missing "").
std::string field_value(const boost::json::object& object, std::string_view path);

// Builds a selector string from a map (k1=v1,k2=v2), sorted by key, for clients.
std::string format_label_selector(const std::map<std::string, std::string>& labels);

}  // namespace kubesandbox::proto
