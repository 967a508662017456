#include "local/runtime/runtime_core.hpp"

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <cctype>
#include <cstdio>
#include <cstring>

namespace kubesandbox::runtime {

namespace json = boost::json;

SplitResult shlex_split(std::string_view s) {
    SplitResult result;
    std::string word;
    bool in_word = false;  // a word has started (quotes start one even when empty)
    std::size_t i = 0;
    auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
    while (i < s.size()) {
        char c = s[i];
        if (is_space(c)) {
            if (in_word) {
                result.words.push_back(std::move(word));
                word.clear();
                in_word = false;
            }
            ++i;
        } else if (c == '\\') {
            if (i + 1 >= s.size()) return {{}, "No escaped character"};
            word += s[i + 1];
            in_word = true;
            i += 2;
        } else if (c == '\'') {
            auto end = s.find('\'', i + 1);
            if (end == std::string_view::npos) return {{}, "No closing quotation"};
            word.append(s.substr(i + 1, end - i - 1));
            in_word = true;
            i = end + 1;
        } else if (c == '"') {
            // Inside double quotes a backslash escapes only '"' and '\'.
            ++i;
            bool closed = false;
            while (i < s.size()) {
                char d = s[i];
                if (d == '"') {
                    closed = true;
                    ++i;
                    break;
                }
                if (d == '\\' && i + 1 < s.size() && (s[i + 1] == '"' || s[i + 1] == '\\')) {
                    word += s[i + 1];
                    i += 2;
                    continue;
                }
                word += d;
                ++i;
            }
            if (!closed) return {{}, "No closing quotation"};
            in_word = true;
        } else {
            word += c;
            in_word = true;
            ++i;
        }
    }
    if (in_word) result.words.push_back(std::move(word));
    return result;
}

namespace {

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

}  // namespace

std::string percent_decode(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '%' && i + 2 < s.size()) {
            int hi = hex_value(s[i + 1]);
            int lo = hex_value(s[i + 2]);
            if (hi >= 0 && lo >= 0) {
                out += static_cast<char>(hi * 16 + lo);
                i += 2;
                continue;
            }
        }
        out += s[i];
    }
    return out;
}

std::string python_list_repr(const std::vector<std::string>& items) {
    std::string out = "[";
    for (std::size_t n = 0; n < items.size(); ++n) {
        if (n) out += ", ";
        const std::string& item = items[n];
        // Python picks double quotes when the text holds a single quote and no double quote.
        char quote = (item.find('\'') != std::string::npos && item.find('"') == std::string::npos) ? '"' : '\'';
        out += quote;
        for (unsigned char c : item) {
            if (c == static_cast<unsigned char>(quote) || c == '\\') {
                out += '\\';
                out += static_cast<char>(c);
            } else if (c == '\n') {
                out += "\\n";
            } else if (c == '\r') {
                out += "\\r";
            } else if (c == '\t') {
                out += "\\t";
            } else if (c < 0x20 || c == 0x7f) {
                char buf[8];
                std::snprintf(buf, sizeof buf, "\\x%02x", c);
                out += buf;
            } else {
                out += static_cast<char>(c);
            }
        }
        out += quote;
    }
    return out + "]";
}

std::string utf8_decode_error(std::string_view s) {
    auto fail = [&](std::size_t pos, const char* why) {
        char buf[128];
        std::snprintf(buf, sizeof buf, "'utf-8' codec can't decode byte 0x%02x in position %zu: %s",
                      static_cast<unsigned char>(s[pos]), pos, why);
        return std::string(buf);
    };
    std::size_t i = 0;
    while (i < s.size()) {
        auto c = static_cast<unsigned char>(s[i]);
        std::size_t len = 0;
        unsigned min_second = 0x80, max_second = 0xBF;
        if (c < 0x80) {
            ++i;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0) min_second = 0xA0;
            if (c == 0xED) max_second = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0) min_second = 0x90;
            if (c == 0xF4) max_second = 0x8F;
        } else {
            return fail(i, "invalid start byte");
        }
        for (std::size_t k = 1; k < len; ++k) {
            if (i + k >= s.size()) return fail(i, "unexpected end of data");
            auto d = static_cast<unsigned char>(s[i + k]);
            unsigned lo = k == 1 ? min_second : 0x80, hi = k == 1 ? max_second : 0xBF;
            if (d < lo || d > hi) return fail(i, "invalid continuation byte");
        }
        i += len;
    }
    return {};
}

std::string os_error_text(int err, std::string_view path) {
    std::string quoted = python_list_repr({std::string(path)});
    return "[Errno " + std::to_string(err) + "] " + std::strerror(err) + ": " + quoted.substr(1, quoted.size() - 2);
}

std::string join_below_base(std::string_view base, std::string_view path) {
    while (!path.empty() && path.front() == '/') path.remove_prefix(1);
    std::string out(base);
    if (path.empty()) return out;
    if (out.empty() || out.back() != '/') out += '/';
    out.append(path);
    return out;
}

bool within_base(std::string_view resolved, std::string_view base) { return resolved.substr(0, base.size()) == base; }

Route route_request(std::string_view method, std::string_view target) {
    auto query = target.find('?');
    std::string_view path = target.substr(0, query);
    std::string decoded = percent_decode(path);
    auto file_route = [&](std::string_view prefix, Route::Kind kind) -> std::optional<Route> {
        if (decoded.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
        // The framework decodes the path once; the handler unquotes it again.
        return Route{kind, percent_decode(std::string_view(decoded).substr(prefix.size()))};
    };
    if (method == "HEAD") return {Route::Kind::method_not_allowed, {}};
    if (decoded == "/") return {method == "GET" ? Route::Kind::health : Route::Kind::method_not_allowed, {}};
    if (decoded == "/execute") return {method == "POST" ? Route::Kind::execute : Route::Kind::method_not_allowed, {}};
    if (decoded == "/upload") return {method == "POST" ? Route::Kind::upload : Route::Kind::method_not_allowed, {}};
    for (auto [prefix, kind] : {std::pair<std::string_view, Route::Kind>{"/download/", Route::Kind::download},
                                {"/list/", Route::Kind::list},
                                {"/exists/", Route::Kind::exists}}) {
        if (auto r = file_route(prefix, kind)) {
            if (method != "GET") return {Route::Kind::method_not_allowed, {}};
            return *r;
        }
    }
    return {Route::Kind::not_found, {}};
}

std::string health_body() {
    return json::serialize(json::object{{"status", "ok"}, {"message", "Sandbox Runtime is active."}});
}

std::string message_body(std::string_view message) { return json::serialize(json::object{{"message", message}}); }

std::string detail_body(std::string_view detail) { return json::serialize(json::object{{"detail", detail}}); }

std::string execute_body(std::string_view stdout_text, std::string_view stderr_text, int exit_code) {
    return json::serialize(json::object{{"stdout", stdout_text}, {"stderr", stderr_text}, {"exit_code", exit_code}});
}

std::string missing_command_body() {
    json::object item{
        {"loc", json::array{"body", "command"}}, {"msg", "field required"}, {"type", "value_error.missing"}};
    return json::serialize(json::object{{"detail", json::array{item}}});
}

std::string invalid_json_body() {
    json::object item{{"loc", json::array{"body", 0}}, {"msg", "Expecting value"}, {"type", "value_error.jsondecode"}};
    return json::serialize(json::object{{"detail", json::array{item}}});
}

std::optional<std::string> execute_command(std::string_view body, bool& malformed) {
    malformed = false;
    boost::system::error_code ec;
    json::value v = json::parse(body, ec);
    if (ec || !v.is_object()) {
        malformed = true;
        return std::nullopt;
    }
    auto* command = v.get_object().if_contains("command");
    if (!command || !command->is_string()) return std::nullopt;
    return std::string(command->get_string());
}

std::string list_body(const std::vector<ListEntry>& entries) {
    json::array out;
    for (const auto& e : entries) {
        out.push_back(json::object{{"name", e.name},
                                   {"size", e.size},
                                   {"type", e.directory ? "directory" : "file"},
                                   {"mod_time", e.mod_time}});
    }
    return json::serialize(out);
}

std::string exists_body(std::string_view path, bool exists) {
    return json::serialize(json::object{{"path", path}, {"exists", exists}});
}

}  // namespace kubesandbox::runtime
