#include "proto/label_selector.hpp"

#include "proto/validation.hpp"

#include <boost/json/value.hpp>

#include <algorithm>
#include <charconv>
#include <optional>

namespace kubesandbox::proto {

namespace {

// ---- label selector lexer (token set and longest-match rules as in apimachinery) ----

enum class Tok {
    end,
    closed_par,
    comma,
    not_exists,  // !
    double_equals,
    equals,
    greater_than,
    identifier,
    in,
    less_than,
    not_equals,
    not_in,
    open_par,
    error,
};

struct Token {
    Tok tok;
    std::string lit;
};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }
bool is_special(char c) { return c == '=' || c == '!' || c == '(' || c == ')' || c == ',' || c == '>' || c == '<'; }

std::optional<Tok> literal_token(std::string_view s) {
    if (s == ")") return Tok::closed_par;
    if (s == ",") return Tok::comma;
    if (s == "!") return Tok::not_exists;
    if (s == "==") return Tok::double_equals;
    if (s == "=") return Tok::equals;
    if (s == ">") return Tok::greater_than;
    if (s == "in") return Tok::in;
    if (s == "<") return Tok::less_than;
    if (s == "!=") return Tok::not_equals;
    if (s == "notin") return Tok::not_in;
    if (s == "(") return Tok::open_par;
    return std::nullopt;
}

std::vector<Token> lex(std::string_view text) {
    // A NUL ends the input, as in the reference lexer.
    if (auto nul = text.find('\0'); nul != std::string_view::npos) text = text.substr(0, nul);
    std::vector<Token> out;
    std::size_t i = 0;
    while (true) {
        while (i < text.size() && is_space(text[i])) ++i;
        if (i >= text.size()) {
            out.push_back({Tok::end, ""});
            return out;
        }
        if (is_special(text[i])) {
            std::string buf;
            std::optional<Token> last;
            while (i < text.size() && is_special(text[i])) {
                buf += text[i];
                if (auto t = literal_token(buf)) {
                    last = Token{*t, buf};
                    ++i;
                } else if (last) {
                    break;
                } else {
                    ++i;
                }
            }
            if (!last) out.push_back({Tok::error, "error expected: keyword found '" + buf + "'"});
            else out.push_back(std::move(*last));
            continue;
        }
        std::size_t start = i;
        while (i < text.size() && !is_special(text[i]) && !is_space(text[i])) ++i;
        std::string word(text.substr(start, i - start));
        auto t = literal_token(word);
        out.push_back({t ? *t : Tok::identifier, std::move(word)});
    }
}

std::optional<std::int64_t> parse_int64(std::string_view s) {
    if (!s.empty() && s.front() == '+') s.remove_prefix(1);
    if (s.empty() || s.front() == '+') return std::nullopt;
    std::int64_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 10);
    if (ec != std::errc{} || p != s.data() + s.size()) return std::nullopt;
    return v;
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
    std::string out;
    for (std::size_t i = 0; i < parts.size(); ++i) {
        if (i) out += sep;
        out += parts[i];
    }
    return out;
}

std::string aggregate(const std::vector<std::string>& errs) {
    if (errs.size() == 1) return errs.front();
    return "[" + join(errs, ", ") + "]";
}

std::string go_string_slice(const std::vector<std::string>& v) {
    std::string out = "[]string{";
    for (std::size_t i = 0; i < v.size(); ++i) {
        if (i) out += ", ";
        out += go_quote(v[i]);
    }
    return out + "}";
}

class Parser {
public:
    explicit Parser(std::string_view text) : tokens_(lex(text)) {}

    Result<std::vector<LabelRequirement>> parse() {
        std::vector<LabelRequirement> reqs;
        while (true) {
            auto& t = lookahead_values();
            switch (t.tok) {
                case Tok::identifier:
                case Tok::not_exists: {
                    auto r = parse_requirement();
                    if (!r) return fail(errc::bad_request, "unable to parse requirement: " + r.error());
                    reqs.push_back(std::move(*r));
                    auto next = consume_values();
                    if (next.tok == Tok::end) return reqs;
                    if (next.tok == Tok::comma) {
                        auto& t2 = lookahead_values();
                        if (t2.tok != Tok::identifier && t2.tok != Tok::not_exists)
                            return fail(errc::bad_request, "found '" + t2.lit + "', expected: identifier after ','");
                        continue;
                    }
                    return fail(errc::bad_request, "found '" + next.lit + "', expected: ',' or 'end of string'");
                }
                case Tok::end:
                    return reqs;
                default:
                    return fail(errc::bad_request,
                                "found '" + t.lit + "', expected: !, identifier, or 'end of string'");
            }
        }
    }

private:
    using Op = LabelRequirement::Op;

    // In value context "in"/"notin" are plain identifiers.
    Token values_view(const Token& t) const {
        if (t.tok == Tok::in || t.tok == Tok::not_in) return {Tok::identifier, t.lit};
        return t;
    }
    const Token& lookahead_raw() const { return tokens_[std::min(pos_, tokens_.size() - 1)]; }
    const Token& lookahead_values() {
        scratch_ = values_view(lookahead_raw());
        return scratch_;
    }
    Token consume_values() {
        auto t = values_view(lookahead_raw());
        if (pos_ < tokens_.size() - 1) ++pos_;
        return t;
    }
    Token consume_raw() {
        auto t = lookahead_raw();
        if (pos_ < tokens_.size() - 1) ++pos_;
        return t;
    }

    tl::expected<LabelRequirement, std::string> parse_requirement() {
        std::optional<Op> op;
        auto t = consume_values();
        if (t.tok == Tok::not_exists) {
            op = Op::not_exists;
            t = consume_values();
        }
        if (t.tok != Tok::identifier) return tl::unexpected("found '" + t.lit + "', expected: identifier");
        std::string key = t.lit;
        if (auto errs = validate_qualified_name(key); !errs.empty())
            return tl::unexpected("key: Invalid value: " + go_quote(key) + ": " + join(errs, "; "));
        auto la = lookahead_values().tok;
        if (la == Tok::end || la == Tok::comma) {
            if (!op) op = Op::exists;
        }
        if (op) return make_requirement(std::move(key), *op, {});

        auto ot = consume_raw();
        switch (ot.tok) {
            case Tok::in:
                op = Op::in;
                break;
            case Tok::equals:
            case Tok::double_equals:
                op = Op::equals;
                break;
            case Tok::greater_than:
                op = Op::greater_than;
                break;
            case Tok::less_than:
                op = Op::less_than;
                break;
            case Tok::not_in:
                op = Op::not_in;
                break;
            case Tok::not_equals:
                op = Op::not_equals;
                break;
            default:
                return tl::unexpected("found '" + ot.lit + "', expected: in, notin, =, ==, !=, gt, lt");
        }
        tl::expected<std::vector<std::string>, std::string> values;
        if (*op == Op::in || *op == Op::not_in) values = parse_values();
        else values = parse_exact_value();
        if (!values) return tl::unexpected(values.error());
        std::sort(values->begin(), values->end());
        values->erase(std::unique(values->begin(), values->end()), values->end());
        return make_requirement(std::move(key), *op, std::move(*values));
    }

    tl::expected<std::vector<std::string>, std::string> parse_values() {
        auto t = consume_values();
        if (t.tok != Tok::open_par) return tl::unexpected("found '" + t.lit + "' expected: '('");
        auto la = lookahead_values();
        switch (la.tok) {
            case Tok::identifier:
            case Tok::comma: {
                auto s = parse_identifiers_list();
                if (!s) return s;
                if (consume_values().tok != Tok::closed_par)
                    return tl::unexpected("found '" + la.lit + "', expected: ')'");
                return s;
            }
            case Tok::closed_par:
                consume_values();
                return std::vector<std::string>{""};
            default:
                return tl::unexpected("found '" + la.lit + "', expected: ',', ')' or identifier");
        }
    }

    tl::expected<std::vector<std::string>, std::string> parse_identifiers_list() {
        std::vector<std::string> s;
        while (true) {
            auto t = consume_values();
            if (t.tok == Tok::identifier) {
                s.push_back(t.lit);
                auto t2 = lookahead_values();
                if (t2.tok == Tok::comma) continue;
                if (t2.tok == Tok::closed_par) return s;
                return tl::unexpected("found '" + t2.lit + "', expected: ',' or ')'");
            }
            if (t.tok == Tok::comma) {
                // "(,", ",)" and ",," stand for empty values.
                if (s.empty()) s.push_back("");
                auto t2 = lookahead_values();
                if (t2.tok == Tok::closed_par) {
                    s.push_back("");
                    return s;
                }
                if (t2.tok == Tok::comma) {
                    consume_values();
                    s.push_back("");
                }
                continue;
            }
            return tl::unexpected("found '" + t.lit + "', expected: ',', or identifier");
        }
    }

    tl::expected<std::vector<std::string>, std::string> parse_exact_value() {
        auto la = lookahead_values().tok;
        if (la == Tok::end || la == Tok::comma) return std::vector<std::string>{""};
        auto t = consume_values();
        if (t.tok == Tok::identifier) return std::vector<std::string>{t.lit};
        return tl::unexpected("found '" + t.lit + "', expected: identifier");
    }

    static tl::expected<LabelRequirement, std::string> make_requirement(std::string key, Op op,
                                                                        std::vector<std::string> vals) {
        std::vector<std::string> errs;
        switch (op) {
            case Op::in:
            case Op::not_in:
                if (vals.empty())
                    errs.push_back("values: Invalid value: " + go_string_slice(vals) +
                                   ": for 'in', 'notin' operators, values set can't be empty");
                break;
            case Op::equals:
            case Op::not_equals:
                if (vals.size() != 1)
                    errs.push_back("values: Invalid value: " + go_string_slice(vals) +
                                   ": exact-match compatibility requires one single value");
                break;
            case Op::exists:
            case Op::not_exists:
                break;
            case Op::greater_than:
            case Op::less_than:
                if (vals.size() != 1)
                    errs.push_back("values: Invalid value: " + go_string_slice(vals) +
                                   ": for 'Gt', 'Lt' operators, exactly one value is required");
                for (std::size_t i = 0; i < vals.size(); ++i)
                    if (!parse_int64(vals[i]))
                        errs.push_back("values[" + std::to_string(i) + "]: Invalid value: " + go_quote(vals[i]) +
                                       ": for 'Gt', 'Lt' operators, the value must be an integer");
                break;
        }
        for (std::size_t i = 0; i < vals.size(); ++i)
            if (auto v = validate_label_value(vals[i]); !v.empty())
                errs.push_back("values[" + std::to_string(i) + "][" + key + "]: Invalid value: " + go_quote(vals[i]) +
                               ": " + join(v, "; "));
        if (!errs.empty()) return tl::unexpected(aggregate(errs));
        return LabelRequirement{std::move(key), op, std::move(vals)};
    }

    std::vector<Token> tokens_;
    std::size_t pos_ = 0;
    Token scratch_{Tok::end, {}};
};

bool requirement_matches(const LabelRequirement& r, const std::string* value) {
    using Op = LabelRequirement::Op;
    auto has = [&](const std::string& v) { return std::binary_search(r.values.begin(), r.values.end(), v); };
    switch (r.op) {
        case Op::equals:
        case Op::in:
            return value && has(*value);
        case Op::not_equals:
        case Op::not_in:
            return !value || !has(*value);
        case Op::exists:
            return value != nullptr;
        case Op::not_exists:
            return value == nullptr;
        case Op::greater_than:
        case Op::less_than: {
            if (!value || r.values.size() != 1) return false;
            auto lhs = parse_int64(*value);
            auto rhs = parse_int64(r.values.front());
            if (!lhs || !rhs) return false;
            return r.op == Op::greater_than ? *lhs > *rhs : *lhs < *rhs;
        }
    }
    return false;
}

std::string_view op_text(LabelRequirement::Op op) {
    using Op = LabelRequirement::Op;
    switch (op) {
        case Op::equals:
            return "=";
        case Op::not_equals:
            return "!=";
        case Op::in:
            return " in ";
        case Op::not_in:
            return " notin ";
        case Op::greater_than:
            return ">";
        case Op::less_than:
            return "<";
        default:
            return "";
    }
}

}  // namespace

Result<LabelSelector> LabelSelector::parse(std::string_view text) {
    Parser p(text);
    auto reqs = p.parse();
    if (!reqs) return fail(std::move(reqs.error()));
    std::stable_sort(reqs->begin(), reqs->end(), [](const auto& a, const auto& b) { return a.key < b.key; });
    LabelSelector s;
    s.requirements_ = std::move(*reqs);
    return s;
}

bool LabelSelector::matches(const boost::json::object* labels) const {
    for (auto& r : requirements_) {
        std::optional<std::string> value;
        if (labels) {
            if (auto it = labels->find(r.key); it != labels->end()) {
                // Labels are strings; anything else counts as present with an empty value.
                value = it->value().is_string() ? std::string(it->value().get_string()) : std::string();
            }
        }
        if (!requirement_matches(r, value ? &*value : nullptr)) return false;
    }
    return true;
}

bool LabelSelector::matches(const std::map<std::string, std::string>& labels) const {
    for (auto& r : requirements_) {
        auto it = labels.find(r.key);
        if (!requirement_matches(r, it == labels.end() ? nullptr : &it->second)) return false;
    }
    return true;
}

bool LabelSelector::empty() const { return requirements_.empty(); }

const std::vector<LabelRequirement>& LabelSelector::requirements() const { return requirements_; }

std::string LabelSelector::to_string() const {
    std::vector<std::string> parts;
    for (auto& r : requirements_) {
        std::string p;
        if (r.op == LabelRequirement::Op::not_exists) p += "!";
        p += r.key;
        p += op_text(r.op);
        if (r.op == LabelRequirement::Op::in || r.op == LabelRequirement::Op::not_in)
            p += "(" + join(r.values, ",") + ")";
        else if (!r.values.empty()) p += r.values.front();
        parts.push_back(std::move(p));
    }
    return join(parts, ",");
}

// ---- field selectors ----

namespace {

std::vector<std::string_view> split_terms(std::string_view s) {
    std::vector<std::string_view> terms;
    if (s.empty()) return terms;
    std::size_t start = 0;
    bool in_slash = false;
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (in_slash) in_slash = false;
        else if (s[i] == '\\') in_slash = true;
        else if (s[i] == ',') {
            terms.push_back(s.substr(start, i - start));
            start = i + 1;
        }
    }
    terms.push_back(s.substr(start));
    return terms;
}

Result<std::string> unescape_field_value(std::string_view s) {
    std::string out;
    bool in_slash = false;
    for (char c : s) {
        if (in_slash) {
            if (c != '\\' && c != ',' && c != '=')
                return fail(errc::bad_request,
                            "invalid field selector: invalid escape sequence: \\" + std::string(1, c));
            out += c;
            in_slash = false;
            continue;
        }
        if (c == '\\') in_slash = true;
        else if (c == ',' || c == '=')
            return fail(errc::bad_request,
                        "invalid field selector: unescaped character in value: '" + std::string(1, c) + "'");
        else out += c;
    }
    if (in_slash) return fail(errc::bad_request, "invalid field selector: invalid escape sequence: \\");
    return out;
}

}  // namespace

Result<FieldSelector> FieldSelector::parse(std::string_view text) {
    auto terms = split_terms(text);
    std::sort(terms.begin(), terms.end());
    FieldSelector sel;
    for (auto term : terms) {
        if (term.empty()) continue;
        std::size_t op_pos = std::string_view::npos, op_len = 0;
        bool equals = true;
        for (std::size_t i = 0; i < term.size(); ++i) {
            auto rest = term.substr(i);
            if (rest.starts_with("!=")) {
                op_pos = i;
                op_len = 2;
                equals = false;
                break;
            }
            if (rest.starts_with("==")) {
                op_pos = i;
                op_len = 2;
                break;
            }
            if (rest.starts_with("=")) {
                op_pos = i;
                op_len = 1;
                break;
            }
        }
        if (op_pos == std::string_view::npos)
            return fail(errc::bad_request,
                        "invalid selector: '" + std::string(text) + "'; can't understand '" + std::string(term) + "'");
        auto value = unescape_field_value(term.substr(op_pos + op_len));
        if (!value) return fail(std::move(value.error()));
        sel.requirements_.push_back({std::string(term.substr(0, op_pos)), equals, std::move(*value)});
    }
    return sel;
}

Result<void> FieldSelector::check_supported(const std::vector<std::string_view>& supported) const {
    for (auto& r : requirements_)
        if (std::find(supported.begin(), supported.end(), r.field) == supported.end())
            return fail(errc::bad_request, "field label not supported: " + r.field);
    return {};
}

std::string field_value(const boost::json::object& object, std::string_view path) {
    const boost::json::object* cur = &object;
    while (true) {
        auto dot = path.find('.');
        auto part = path.substr(0, dot);
        auto it = cur->find(part);
        if (it == cur->end()) return {};
        const auto& v = it->value();
        if (dot == std::string_view::npos) {
            if (v.is_string()) return std::string(v.get_string());
            if (v.is_bool()) return v.get_bool() ? "true" : "false";
            if (v.is_int64()) return std::to_string(v.get_int64());
            if (v.is_uint64()) return std::to_string(v.get_uint64());
            return {};
        }
        if (!v.is_object()) return {};
        cur = &v.get_object();
        path.remove_prefix(dot + 1);
    }
}

bool FieldSelector::matches(const boost::json::object& object) const {
    for (auto& r : requirements_)
        if ((field_value(object, r.field) == r.value) != r.equals) return false;
    return true;
}

bool FieldSelector::empty() const { return requirements_.empty(); }

const std::vector<FieldRequirement>& FieldSelector::requirements() const { return requirements_; }

std::string format_label_selector(const std::map<std::string, std::string>& labels) {
    std::string out;
    for (auto& [k, v] : labels) {
        if (!out.empty()) out += ",";
        out += k + "=" + v;
    }
    return out;
}

}  // namespace kubesandbox::proto
