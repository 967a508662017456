#include "proto/validation.hpp"

#include <openssl/evp.h>

#include <boost/json/value.hpp>

#include <algorithm>
#include <random>

namespace kubesandbox::proto {

namespace {

constexpr std::size_t dns1123_label_max = 63;
constexpr std::size_t dns1123_subdomain_max = 253;
constexpr std::size_t qualified_name_max = 63;
constexpr std::size_t label_value_max = 63;
constexpr std::size_t annotations_max_bytes = 262144;

constexpr std::string_view qualified_name_fmt = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
constexpr std::string_view qualified_name_err =
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character";
constexpr std::string_view label_value_fmt = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
constexpr std::string_view label_value_err =
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character";
constexpr std::string_view dns1123_label_fmt = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
constexpr std::string_view dns1123_label_err =
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character";
constexpr std::string_view dns1123_subdomain_fmt = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
constexpr std::string_view dns1123_subdomain_err =
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character";
constexpr std::string_view dns1035_label_fmt = "[a-z]([-a-z0-9]*[a-z0-9])?";
constexpr std::string_view dns1035_label_err =
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character";

// apimachinery's RegexError layout, including its "',  or '" between examples.
std::string regex_error(std::string_view msg, std::string_view fmt, std::initializer_list<std::string_view> examples) {
    std::string out(msg);
    out += " (e.g. ";
    bool first = true;
    for (auto ex : examples) {
        if (!first) out += " or ";
        first = false;
        out += "'";
        out += ex;
        out += "', ";
    }
    out += "regex used for validation is '";
    out += fmt;
    out += "')";
    return out;
}

std::string max_len_error(std::size_t n) { return "must be no more than " + std::to_string(n) + " characters"; }

bool is_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }
bool is_lower_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// ([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]
bool matches_qualified_name(std::string_view s) {
    if (s.empty() || !is_alnum(s.front()) || !is_alnum(s.back())) return false;
    return std::all_of(s.begin(), s.end(), [](char c) { return is_alnum(c) || c == '-' || c == '_' || c == '.'; });
}

// [a-z0-9]([-a-z0-9]*[a-z0-9])?
bool matches_dns1123_label(std::string_view s) {
    if (s.empty() || !is_lower_alnum(s.front()) || !is_lower_alnum(s.back())) return false;
    return std::all_of(s.begin(), s.end(), [](char c) { return is_lower_alnum(c) || c == '-'; });
}

bool matches_dns1123_subdomain(std::string_view s) {
    if (s.empty()) return false;
    std::size_t start = 0;
    while (true) {
        auto dot = s.find('.', start);
        auto part = s.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
        if (!matches_dns1123_label(part)) return false;
        if (dot == std::string_view::npos) return true;
        start = dot + 1;
    }
}

bool matches_dns1035_label(std::string_view s) {
    return matches_dns1123_label(s) && s.front() >= 'a' && s.front() <= 'z';
}

// Prefix mode (generateName): a trailing '-' is allowed, so mask it as apimachinery does.
std::string mask_trailing_dash(std::string_view s) {
    std::string out(s);
    if (out.size() > 1 && out.back() == '-') out.back() = 'a';
    return out;
}

std::string field_invalid_body(std::string_view value, std::string_view detail) {
    return "Invalid value: " + go_quote(value) + ": " + std::string(detail);
}

StatusCause invalid_cause(std::string field, std::string_view value, std::string_view detail) {
    return StatusCause{"FieldValueInvalid", field_invalid_body(value, detail), std::move(field)};
}

std::string hex_sha256(std::string_view input, std::size_t hex_chars) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_Digest(input.data(), input.size(), md, &len, EVP_sha256(), nullptr) != 1) len = 0;
    static constexpr char digits[] = "0123456789abcdef";
    std::string out;
    for (unsigned i = 0; i < len && out.size() < hex_chars; ++i) {
        out += digits[md[i] >> 4];
        out += digits[md[i] & 0xf];
    }
    out.resize(std::min(out.size(), hex_chars));
    return out;
}

}  // namespace

std::string go_quote(std::string_view s) {
    static constexpr char hex[] = "0123456789abcdef";
    std::string out = "\"";
    for (std::size_t i = 0; i < s.size(); ++i) {
        auto c = static_cast<unsigned char>(s[i]);
        switch (c) {
            case '"':
                out += "\\\"";
                continue;
            case '\\':
                out += "\\\\";
                continue;
            case '\a':
                out += "\\a";
                continue;
            case '\b':
                out += "\\b";
                continue;
            case '\f':
                out += "\\f";
                continue;
            case '\n':
                out += "\\n";
                continue;
            case '\r':
                out += "\\r";
                continue;
            case '\t':
                out += "\\t";
                continue;
            case '\v':
                out += "\\v";
                continue;
            default:
                break;
        }
        if (c >= 0x20 && c < 0x7f) {
            out += static_cast<char>(c);
            continue;
        }
        if (c >= 0x80) {
            // Keep well-formed UTF-8 sequences as they are; escape stray bytes.
            std::size_t n = c >= 0xf0 && c < 0xf5 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
            if (c >= 0xf5) n = 0;
            bool ok = n > 0 && i + n <= s.size();
            for (std::size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xc0) == 0x80;
            if (ok) {
                out.append(s.substr(i, n));
                i += n - 1;
                continue;
            }
        }
        out += "\\x";
        out += hex[c >> 4];
        out += hex[c & 0xf];
    }
    out += "\"";
    return out;
}

std::vector<std::string> validate_dns1123_subdomain(std::string_view v) {
    std::vector<std::string> errs;
    if (v.size() > dns1123_subdomain_max) errs.push_back(max_len_error(dns1123_subdomain_max));
    if (!matches_dns1123_subdomain(v))
        errs.push_back(regex_error(dns1123_subdomain_err, dns1123_subdomain_fmt, {"example.com"}));
    return errs;
}

std::vector<std::string> validate_dns1123_label(std::string_view v) {
    std::vector<std::string> errs;
    if (v.size() > dns1123_label_max) errs.push_back(max_len_error(dns1123_label_max));
    if (!matches_dns1123_label(v))
        errs.push_back(regex_error(dns1123_label_err, dns1123_label_fmt, {"my-name", "123-abc"}));
    return errs;
}

std::vector<std::string> validate_dns1035_label(std::string_view v) {
    std::vector<std::string> errs;
    if (v.size() > dns1123_label_max) errs.push_back(max_len_error(dns1123_label_max));
    if (!matches_dns1035_label(v))
        errs.push_back(regex_error(dns1035_label_err, dns1035_label_fmt, {"my-name", "abc-123"}));
    return errs;
}

std::vector<std::string> validate_qualified_name(std::string_view v) {
    std::vector<std::string> errs;
    std::string_view name;
    auto slash = v.find('/');
    if (slash == std::string_view::npos) {
        name = v;
    } else if (v.find('/', slash + 1) != std::string_view::npos) {
        errs.push_back("a qualified name " +
                       regex_error(qualified_name_err, qualified_name_fmt, {"MyName", "my.name", "123-abc"}) +
                       " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')");
        return errs;
    } else {
        auto prefix = v.substr(0, slash);
        name = v.substr(slash + 1);
        if (prefix.empty()) {
            errs.push_back("prefix part must be non-empty");
        } else {
            for (auto& m : validate_dns1123_subdomain(prefix)) errs.push_back("prefix part " + m);
        }
    }
    if (name.empty()) errs.push_back("name part must be non-empty");
    else if (name.size() > qualified_name_max) errs.push_back("name part " + max_len_error(qualified_name_max));
    if (!matches_qualified_name(name))
        errs.push_back("name part " +
                       regex_error(qualified_name_err, qualified_name_fmt, {"MyName", "my.name", "123-abc"}));
    return errs;
}

std::vector<std::string> validate_label_value(std::string_view v) {
    std::vector<std::string> errs;
    if (v.size() > label_value_max) errs.push_back(max_len_error(label_value_max));
    if (!v.empty() && !matches_qualified_name(v))
        errs.push_back(regex_error(label_value_err, label_value_fmt, {"MyValue", "my_value", "12345"}));
    return errs;
}

bool is_valid_label_value(std::string_view v) {
    return v.empty() || (v.size() <= label_value_max && matches_qualified_name(v));
}

std::string sanitize_label_value(std::string_view v) {
    if (is_valid_label_value(v)) return std::string(v);
    constexpr std::size_t hash_chars = 10;
    constexpr std::size_t prefix_max = label_value_max - hash_chars - 1;
    std::string prefix;
    for (char c : v) {
        if (prefix.size() >= prefix_max) break;
        bool allowed = is_alnum(c) || c == '-' || c == '_' || c == '.';
        if (!allowed) {
            if (prefix.empty() || prefix.back() == '-') continue;  // no runs of '-'
            c = '-';
        } else if (prefix.empty() && !is_alnum(c)) {
            continue;  // must start alphanumeric
        }
        prefix += c;
    }
    while (!prefix.empty() && !is_alnum(prefix.back())) prefix.pop_back();
    auto hash = hex_sha256(v, hash_chars);
    if (prefix.empty()) return hash;
    return prefix + "-" + hash;
}

std::vector<std::string> validate_name(std::string_view name, NameRule rule, bool prefix) {
    std::string n = prefix ? mask_trailing_dash(name) : std::string(name);
    switch (rule) {
        case NameRule::dns1123_subdomain:
            return validate_dns1123_subdomain(n);
        case NameRule::dns1123_label:
            return validate_dns1123_label(n);
        case NameRule::dns1035_label:
            return validate_dns1035_label(n);
    }
    return {};
}

namespace {

std::vector<std::string> path_segment_errors(std::string_view name, bool prefix) {
    std::vector<std::string> errs;
    if (!prefix && (name == "." || name == "..")) errs.push_back("may not be '" + std::string(name) + "'");
    for (std::string_view bad : {"/", "%"})
        if (name.find(bad) != std::string_view::npos) errs.push_back("may not contain '" + std::string(bad) + "'");
    return errs;
}

std::string_view string_member(const boost::json::object& o, std::string_view key) {
    auto it = o.find(key);
    if (it == o.end() || !it->value().is_string()) return {};
    return it->value().get_string();
}

}  // namespace

std::vector<StatusCause> validate_object_meta(const boost::json::object& metadata, NameRule rule,
                                              bool require_name_or_generate) {
    std::vector<StatusCause> causes;
    auto name = string_member(metadata, "name");
    auto generate = string_member(metadata, "generateName");

    if (!generate.empty()) {
        for (auto& m : validate_name(generate, rule, true))
            causes.push_back(invalid_cause("metadata.generateName", generate, m));
        for (auto& m : path_segment_errors(generate, true))
            causes.push_back(invalid_cause("metadata.generateName", generate, m));
    }
    if (name.empty()) {
        if (require_name_or_generate && generate.empty())
            causes.push_back(
                StatusCause{"FieldValueRequired", "Required value: name or generateName is required", "metadata.name"});
    } else {
        for (auto& m : validate_name(name, rule, false)) causes.push_back(invalid_cause("metadata.name", name, m));
        for (auto& m : path_segment_errors(name, false)) causes.push_back(invalid_cause("metadata.name", name, m));
    }

    if (auto it = metadata.find("labels"); it != metadata.end() && !it->value().is_null()) {
        if (!it->value().is_object()) {
            causes.push_back(invalid_cause("metadata.labels", "", "must be a map of strings"));
        } else {
            for (auto& kv : it->value().get_object()) {
                std::string_view key = kv.key();
                for (auto& m : validate_qualified_name(key)) causes.push_back(invalid_cause("metadata.labels", key, m));
                if (!kv.value().is_string()) {
                    causes.push_back(invalid_cause("metadata.labels", key, "value must be a string"));
                    continue;
                }
                std::string_view value = kv.value().get_string();
                for (auto& m : validate_label_value(value))
                    causes.push_back(invalid_cause("metadata.labels", value, m));
            }
        }
    }

    if (auto it = metadata.find("annotations"); it != metadata.end() && !it->value().is_null()) {
        if (!it->value().is_object()) {
            causes.push_back(invalid_cause("metadata.annotations", "", "must be a map of strings"));
        } else {
            std::size_t total = 0;
            for (auto& kv : it->value().get_object()) {
                std::string_view key = kv.key();
                std::string lower(key);
                std::transform(lower.begin(), lower.end(), lower.begin(),
                               [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; });
                for (auto& m : validate_qualified_name(lower))
                    causes.push_back(invalid_cause("metadata.annotations", key, m));
                total += key.size();
                if (kv.value().is_string()) total += kv.value().get_string().size();
                else causes.push_back(invalid_cause("metadata.annotations", key, "value must be a string"));
            }
            if (total > annotations_max_bytes)
                causes.push_back(
                    StatusCause{"FieldValueTooLong",
                                "Too long: may not be more than " + std::to_string(annotations_max_bytes) + " bytes",
                                "metadata.annotations"});
        }
    }
    return causes;
}

std::string invalid_message(std::string_view kind_with_group, std::string_view name,
                            const std::vector<StatusCause>& causes) {
    std::string out(kind_with_group);
    // Appended piecewise: g++ 12 -O3 reports a false -Wrestrict on `" " + go_quote(name)`.
    out += ' ';
    out += go_quote(name);
    out += " is invalid";
    // Like apimachinery's aggregate: duplicates dropped, brackets only for several.
    std::vector<std::string> parts;
    for (auto& c : causes) {
        std::string p = c.field.empty() ? c.message : c.field + ": " + c.message;
        if (std::find(parts.begin(), parts.end(), p) == parts.end()) parts.push_back(std::move(p));
    }
    if (parts.empty()) return out;
    out += ": ";
    if (parts.size() == 1) return out + parts.front();
    out += "[";
    for (std::size_t i = 0; i < parts.size(); ++i) {
        if (i) out += ", ";
        out += parts[i];
    }
    return out + "]";
}

std::string generate_name(std::string_view prefix) {
    static constexpr std::string_view alphabet = "bcdfghjklmnpqrstvwxz2456789";
    thread_local std::mt19937_64 rng{std::random_device{}()};
    std::uniform_int_distribution<std::size_t> pick(0, alphabet.size() - 1);
    std::string out(prefix.substr(0, 58));
    for (int i = 0; i < 5; ++i) out += alphabet[pick(rng)];
    return out;
}

}  // namespace kubesandbox::proto
