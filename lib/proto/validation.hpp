// Name, label and annotation validation with apimachinery's wording, shared by the local
// cluster (422 answers) and the client (early checks). Sans-IO.
#pragma once

#include <kubesandbox/error.hpp>

#include <boost/json/object.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace kubesandbox::proto {

// Each returns a list of problem messages in apimachinery wording (empty = valid).
std::vector<std::string> validate_dns1123_subdomain(std::string_view);
std::vector<std::string> validate_dns1123_label(std::string_view);
std::vector<std::string> validate_dns1035_label(std::string_view);
std::vector<std::string> validate_qualified_name(std::string_view);  // label/annotation keys
std::vector<std::string> validate_label_value(std::string_view);
bool is_valid_label_value(std::string_view);

// Maps any string to a valid label value (<= 63 chars, allowed charset, alphanumeric ends).
// Valid values come back unchanged; others become a readable prefix + '-' + 10 hex chars of
// the SHA-256 of the input, so distinct inputs stay distinct.
std::string sanitize_label_value(std::string_view);

enum class NameRule { dns1123_subdomain, dns1123_label, dns1035_label };

// Messages of a name rule; `prefix` validates a generateName prefix (may end in '-').
std::vector<std::string> validate_name(std::string_view name, NameRule rule, bool prefix = false);

// Validates metadata for create/update: name (rule + path-segment rule) or generateName
// prefix, labels, annotations (keys, total size <= 262144 bytes). Causes carry field paths
// "metadata.name", "metadata.generateName", "metadata.labels", "metadata.annotations".
std::vector<StatusCause> validate_object_meta(const boost::json::object& metadata, NameRule rule,
                                              bool require_name_or_generate);

// `Pod "Bad_Name" is invalid: metadata.name: Invalid value: ...` (bracketed list when several).
std::string invalid_message(std::string_view kind_with_group, std::string_view name,
                            const std::vector<StatusCause>& causes);

// Go's %q for a string (used in messages: `Invalid value: "x"`).
std::string go_quote(std::string_view);

// generateName: prefix truncated to 58 chars + 5 random chars from "bcdfghjklmnpqrstvwxz2456789".
std::string generate_name(std::string_view prefix);

}  // namespace kubesandbox::proto
