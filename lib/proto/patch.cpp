#include "proto/patch.hpp"

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/string.hpp>

#include <optional>
#include <string>
#include <vector>

namespace kubesandbox::proto {

namespace json = boost::json;

bool json_equal(const json::value& a, const json::value& b) {
    auto is_num = [](const json::value& v) { return v.is_int64() || v.is_uint64() || v.is_double(); };
    if (is_num(a) && is_num(b)) {
        if (a.is_double() || b.is_double()) return a.to_number<double>() == b.to_number<double>();
        if (a.is_int64() && b.is_int64()) return a.get_int64() == b.get_int64();
        if (a.is_uint64() && b.is_uint64()) return a.get_uint64() == b.get_uint64();
        auto i = a.is_int64() ? a.get_int64() : b.get_int64();
        auto u = a.is_uint64() ? a.get_uint64() : b.get_uint64();
        return i >= 0 && static_cast<std::uint64_t>(i) == u;
    }
    if (a.kind() != b.kind()) return false;
    switch (a.kind()) {
        case json::kind::object: {
            const auto& oa = a.get_object();
            const auto& ob = b.get_object();
            if (oa.size() != ob.size()) return false;
            for (auto& kv : oa) {
                auto it = ob.find(kv.key());
                if (it == ob.end() || !json_equal(kv.value(), it->value())) return false;
            }
            return true;
        }
        case json::kind::array: {
            const auto& aa = a.get_array();
            const auto& ab = b.get_array();
            if (aa.size() != ab.size()) return false;
            for (std::size_t i = 0; i < aa.size(); ++i)
                if (!json_equal(aa[i], ab[i])) return false;
            return true;
        }
        default:
            return a == b;
    }
}

// ---------------- RFC 7386 ----------------

json::value apply_merge_patch(const json::value& target, const json::value& patch) {
    if (!patch.is_object()) return patch;
    json::object result = target.is_object() ? target.get_object() : json::object{};
    for (auto& kv : patch.get_object()) {
        if (kv.value().is_null()) {
            result.erase(kv.key());
            continue;
        }
        auto it = result.find(kv.key());
        static const json::value null_value;
        result[kv.key()] = apply_merge_patch(it == result.end() ? null_value : it->value(), kv.value());
    }
    return result;
}

json::value merge_patch_between(const json::value& from, const json::value& to) {
    if (!from.is_object() || !to.is_object()) return to;
    json::object patch;
    for (const auto& kv : from.get_object())
        if (!to.get_object().contains(kv.key())) patch[kv.key()] = nullptr;
    for (const auto& kv : to.get_object()) {
        const json::value* before = from.get_object().if_contains(kv.key());
        if (!before) patch[kv.key()] = kv.value();
        else if (!json_equal(*before, kv.value())) patch[kv.key()] = merge_patch_between(*before, kv.value());
    }
    return patch;
}

// ---------------- RFC 6902 ----------------

namespace {

constexpr std::string_view rejected = "the server rejected our request due to an error in our request";

tl::unexpected<Error> invalid(std::string detail) {
    auto e = make_error(errc::invalid, std::string(rejected));
    e.http_status = 422;
    e.reason = "Invalid";
    e.causes.push_back(StatusCause{"UnexpectedServerResponse", std::move(detail), ""});
    return tl::unexpected<Error>(std::move(e));
}

Result<std::vector<std::string>> parse_pointer(std::string_view ptr) {
    std::vector<std::string> tokens;
    if (ptr.empty()) return tokens;
    if (ptr.front() != '/')
        return fail(errc::bad_request, "JSON pointer must be empty or start with '/': " + std::string(ptr));
    std::string cur;
    for (std::size_t i = 1; i <= ptr.size(); ++i) {
        if (i == ptr.size() || ptr[i] == '/') {
            tokens.push_back(std::move(cur));
            cur.clear();
            continue;
        }
        if (ptr[i] == '~') {
            if (i + 1 < ptr.size() && ptr[i + 1] == '0') cur += '~';
            else if (i + 1 < ptr.size() && ptr[i + 1] == '1') cur += '/';
            else return fail(errc::bad_request, "invalid escape in JSON pointer: " + std::string(ptr));
            ++i;
            continue;
        }
        cur += ptr[i];
    }
    return tokens;
}

std::optional<std::size_t> parse_index(std::string_view tok) {
    if (tok.empty() || tok.size() > 18) return std::nullopt;
    if (tok.size() > 1 && tok.front() == '0') return std::nullopt;
    std::size_t v = 0;
    for (char c : tok) {
        if (c < '0' || c > '9') return std::nullopt;
        v = v * 10 + static_cast<std::size_t>(c - '0');
    }
    return v;
}

// The value at `tokens[0..n)`, or an error naming the path.
Result<json::value*> resolve(json::value& doc, const std::vector<std::string>& tokens, std::size_t n,
                             std::string_view path) {
    json::value* cur = &doc;
    for (std::size_t i = 0; i < n; ++i) {
        if (cur->is_object()) {
            auto it = cur->get_object().find(tokens[i]);
            if (it == cur->get_object().end()) return invalid("doc is missing path: \"" + std::string(path) + "\"");
            cur = &it->value();
        } else if (cur->is_array()) {
            auto idx = parse_index(tokens[i]);
            if (!idx || *idx >= cur->get_array().size())
                return invalid("doc is missing path: \"" + std::string(path) + "\"");
            cur = &cur->get_array()[*idx];
        } else {
            return invalid("doc is missing path: \"" + std::string(path) + "\"");
        }
    }
    return cur;
}

Result<void> op_add(json::value& doc, const std::vector<std::string>& tokens, json::value value,
                    std::string_view path) {
    if (tokens.empty()) {
        doc = std::move(value);
        return {};
    }
    auto parent = resolve(doc, tokens, tokens.size() - 1, path);
    if (!parent) return fail(std::move(parent.error()));
    const auto& last = tokens.back();
    if ((*parent)->is_object()) {
        (*parent)->get_object()[last] = std::move(value);
        return {};
    }
    if ((*parent)->is_array()) {
        auto& arr = (*parent)->get_array();
        if (last == "-") {
            arr.push_back(std::move(value));
            return {};
        }
        auto idx = parse_index(last);
        if (!idx || *idx > arr.size())
            return invalid("add operation does not apply: index out of bounds: \"" + std::string(path) + "\"");
        arr.insert(arr.begin() + static_cast<std::ptrdiff_t>(*idx), std::move(value));
        return {};
    }
    return invalid("doc is missing path: \"" + std::string(path) + "\"");
}

Result<json::value> op_remove(json::value& doc, const std::vector<std::string>& tokens, std::string_view path) {
    if (tokens.empty()) return invalid("unable to remove the whole document");
    auto parent = resolve(doc, tokens, tokens.size() - 1, path);
    if (!parent) return fail(std::move(parent.error()));
    const auto& last = tokens.back();
    if ((*parent)->is_object()) {
        auto& obj = (*parent)->get_object();
        auto it = obj.find(last);
        if (it == obj.end()) return invalid("unable to remove nonexistent key: " + last + ": missing value");
        json::value out = std::move(it->value());
        obj.erase(it);
        return out;
    }
    if ((*parent)->is_array()) {
        auto& arr = (*parent)->get_array();
        auto idx = parse_index(last);
        if (!idx || *idx >= arr.size())
            return invalid("remove operation does not apply: index out of bounds: \"" + std::string(path) + "\"");
        json::value out = std::move(arr[*idx]);
        arr.erase(arr.begin() + static_cast<std::ptrdiff_t>(*idx));
        return out;
    }
    return invalid("doc is missing path: \"" + std::string(path) + "\"");
}

Result<std::string_view> string_member(const json::object& op, std::string_view key, std::size_t index) {
    auto it = op.find(key);
    if (it == op.end() || !it->value().is_string())
        return fail(errc::bad_request,
                    "json patch operation " + std::to_string(index) + " is missing \"" + std::string(key) + "\"");
    return std::string_view(it->value().get_string());
}

// Serialized size of `v`, counted only up to `cap` (enough to refuse, without walking a huge value).
std::size_t size_up_to(const json::value& v, std::size_t cap) {
    std::size_t n = 0;
    std::vector<const json::value*> todo{&v};
    while (!todo.empty() && n <= cap) {
        const json::value* cur = todo.back();
        todo.pop_back();
        switch (cur->kind()) {
            case json::kind::object:
                n += 2;
                for (const auto& [k, child] : cur->get_object()) {
                    n += k.size() + 4;
                    todo.push_back(&child);
                }
                break;
            case json::kind::array:
                n += 2;
                for (const auto& child : cur->get_array()) {
                    n += 1;
                    todo.push_back(&child);
                }
                break;
            case json::kind::string:
                n += cur->get_string().size() + 2;
                break;
            default:
                n += 8;
        }
    }
    return n;
}

}  // namespace

Result<json::value> apply_json_patch(const json::value& target, const json::value& patch) {
    if (!patch.is_array()) return fail(errc::bad_request, "json patch must be an array of operations");
    if (patch.get_array().size() > max_json_patch_operations)
        return fail(errc::request_entity_too_large, "The allowed maximum operations in a JSON patch is " +
                                                        std::to_string(max_json_patch_operations) + ", got " +
                                                        std::to_string(patch.get_array().size()));
    // Validate the whole document first so a malformed patch never half-applies.
    for (std::size_t i = 0; i < patch.get_array().size(); ++i) {
        const auto& opv = patch.get_array()[i];
        if (!opv.is_object())
            return fail(errc::bad_request, "json patch operation " + std::to_string(i) + " is not an object");
        const auto& op = opv.get_object();
        auto name = string_member(op, "op", i);
        if (!name) return fail(std::move(name.error()));
        auto path = string_member(op, "path", i);
        if (!path) return fail(std::move(path.error()));
        if (auto t = parse_pointer(*path); !t) return fail(std::move(t.error()));
        if (*name == "add" || *name == "replace" || *name == "test") {
            if (!op.contains("value"))
                return fail(errc::bad_request, "json patch operation " + std::to_string(i) + " (" + std::string(*name) +
                                                   ") is missing \"value\"");
        } else if (*name == "move" || *name == "copy") {
            auto from = string_member(op, "from", i);
            if (!from) return fail(std::move(from.error()));
            if (auto t = parse_pointer(*from); !t) return fail(std::move(t.error()));
        } else if (*name != "remove") {
            return fail(errc::bad_request, "Unexpected kind: " + std::string(*name));
        }
    }

    json::value doc = target;
    std::size_t copied = 0;  // each copy may double the document: the growth is bounded
    for (const auto& opv : patch.get_array()) {
        const auto& op = opv.get_object();
        std::string_view name = op.at("op").get_string();
        std::string_view path = op.at("path").get_string();
        auto tokens = *parse_pointer(path);
        if (name == "add") {
            if (auto r = op_add(doc, tokens, op.at("value"), path); !r) return fail(std::move(r.error()));
        } else if (name == "remove") {
            if (auto r = op_remove(doc, tokens, path); !r) return fail(std::move(r.error()));
        } else if (name == "replace") {
            auto existing = resolve(doc, tokens, tokens.size(), path);
            if (!existing) return invalid("replace operation does not apply: doc is missing key: " + std::string(path));
            **existing = op.at("value");
        } else if (name == "test") {
            auto existing = resolve(doc, tokens, tokens.size(), path);
            if (!existing || !json_equal(**existing, op.at("value")))
                return invalid("testing value " + std::string(path) + " failed: test failed");
        } else {
            std::string_view from = op.at("from").get_string();
            auto from_tokens = *parse_pointer(from);
            if (name == "move") {
                if (from == path) continue;
                // A location cannot be moved into one of its own children.
                if (from_tokens.size() < tokens.size() &&
                    std::equal(from_tokens.begin(), from_tokens.end(), tokens.begin()))
                    return invalid("move operation cannot move " + std::string(from) + " into its child " +
                                   std::string(path));
                auto value = op_remove(doc, from_tokens, from);
                if (!value) return fail(std::move(value.error()));
                if (auto r = op_add(doc, tokens, std::move(*value), path); !r) return fail(std::move(r.error()));
            } else {
                auto value = resolve(doc, from_tokens, from_tokens.size(), from);
                if (!value) return fail(std::move(value.error()));
                copied += size_up_to(**value, max_json_patch_copy_bytes);
                if (copied > max_json_patch_copy_bytes)
                    return fail(errc::request_entity_too_large,
                                "Unable to copy, the accumulated size increase of copy is more than the limit of " +
                                    std::to_string(max_json_patch_copy_bytes) + " bytes");
                json::value copy = **value;
                if (auto r = op_add(doc, tokens, std::move(copy), path); !r) return fail(std::move(r.error()));
            }
        }
    }
    return doc;
}

// ---------------- strategic merge patch ----------------

namespace {

enum class ListKind { replace, keyed, set };

struct ListStrategy {
    ListKind kind = ListKind::replace;
    std::string_view key;
};

bool any_has(const json::array& a, std::string_view key) {
    for (auto& e : a)
        if (e.is_object() && e.get_object().contains(key)) return true;
    return false;
}

// Known list fields of built-in kinds (by field name; the containing type is implied).
ListStrategy strategy_for(std::string_view field, const json::array* orig, const json::array& patch) {
    if (field == "containers" || field == "initContainers" || field == "ephemeralContainers" || field == "volumes" ||
        field == "env")
        return {ListKind::keyed, "name"};
    if (field == "volumeMounts") return {ListKind::keyed, "mountPath"};
    if (field == "volumeDevices") return {ListKind::keyed, "devicePath"};
    if (field == "conditions") return {ListKind::keyed, "type"};
    if (field == "ownerReferences") return {ListKind::keyed, "uid"};
    if (field == "finalizers") return {ListKind::set, {}};
    if (field == "ports") {
        // Container ports merge by containerPort, Service ports by port.
        if (any_has(patch, "containerPort") || (orig && any_has(*orig, "containerPort")))
            return {ListKind::keyed, "containerPort"};
        return {ListKind::keyed, "port"};
    }
    return {};
}

Result<std::optional<json::object>> merge_map(json::object orig, const json::object& patch);

// A patch value placed where nothing existed: directives and nulls resolved against empty.
Result<std::optional<json::value>> fresh_value(std::string_view field, const json::value& v) {
    if (v.is_object()) {
        auto r = merge_map({}, v.get_object());
        if (!r) return fail(std::move(r.error()));
        if (!*r) return std::optional<json::value>{};
        return std::optional<json::value>{json::value(std::move(**r))};
    }
    (void)field;
    return std::optional<json::value>{v};
}

Result<json::array> merge_list(std::string_view field, const json::array& orig, const json::array& patch,
                               ListStrategy st) {
    // {"$patch": "replace"} as an element replaces the whole list with the other elements.
    for (auto& e : patch) {
        if (!e.is_object()) continue;
        auto it = e.get_object().find("$patch");
        if (it == e.get_object().end()) continue;
        if (it->value() == "replace") {
            json::array out;
            for (auto& x : patch) {
                if (&x == &e) continue;
                auto v = fresh_value(field, x);
                if (!v) return fail(std::move(v.error()));
                if (*v) out.push_back(std::move(**v));
            }
            return out;
        }
    }
    json::array out = orig;
    if (st.kind == ListKind::set) {
        for (auto& e : patch) {
            bool present = false;
            for (auto& x : out) present = present || json_equal(x, e);
            if (!present) out.push_back(e);
        }
        return out;
    }
    for (auto& e : patch) {
        if (!e.is_object())
            return fail(errc::bad_request, "unable to merge list \"" + std::string(field) +
                                               "\": element is not an object: " + json::serialize(e));
        const auto& eo = e.get_object();
        auto key_it = eo.find(st.key);
        if (key_it == eo.end())
            return fail(errc::bad_request,
                        "map: " + json::serialize(e) + " does not contain declared merge key: " + std::string(st.key));
        auto directive = eo.find("$patch");
        bool del = false;
        if (directive != eo.end()) {
            if (directive->value() == "delete") del = true;
            else if (directive->value() != "merge")
                return fail(errc::bad_request, "unknown patch type: " + json::serialize(directive->value()) +
                                                   " in list " + std::string(field));
        }
        std::size_t i = 0;
        for (; i < out.size(); ++i) {
            if (!out[i].is_object()) continue;
            auto k = out[i].get_object().find(st.key);
            if (k != out[i].get_object().end() && json_equal(k->value(), key_it->value())) break;
        }
        if (del) {
            // Remove every element with that key.
            for (std::size_t j = out.size(); j-- > 0;) {
                if (!out[j].is_object()) continue;
                auto k = out[j].get_object().find(st.key);
                if (k != out[j].get_object().end() && json_equal(k->value(), key_it->value()))
                    out.erase(out.begin() + static_cast<std::ptrdiff_t>(j));
            }
            continue;
        }
        if (i < out.size()) {
            auto merged = merge_map(out[i].get_object(), eo);
            if (!merged) return fail(std::move(merged.error()));
            if (*merged) out[i] = std::move(**merged);
            else out.erase(out.begin() + static_cast<std::ptrdiff_t>(i));
        } else {
            auto merged = merge_map({}, eo);
            if (!merged) return fail(std::move(merged.error()));
            if (*merged) out.push_back(std::move(**merged));
        }
    }
    return out;
}

// nullopt: the map itself is deleted ("$patch": "delete").
Result<std::optional<json::object>> merge_map(json::object orig, const json::object& patch) {
    if (auto it = patch.find("$patch"); it != patch.end()) {
        if (it->value() == "delete") return std::optional<json::object>{};
        if (it->value() == "replace") {
            json::object clean;
            for (auto& kv : patch) {
                if (kv.key().starts_with("$")) continue;
                auto v = fresh_value(kv.key(), kv.value());
                if (!v) return fail(std::move(v.error()));
                if (*v && !(*v)->is_null()) clean[kv.key()] = std::move(**v);
            }
            return std::optional<json::object>{std::move(clean)};
        }
        if (it->value() != "merge")
            return fail(errc::bad_request, "unknown patch type: " + json::serialize(it->value()));
    }
    for (auto& kv : patch) {
        std::string_view key = kv.key();
        if (key.starts_with("$")) {
            constexpr std::string_view del_prefix = "$deleteFromPrimitiveList/";
            if (key.starts_with(del_prefix)) {
                auto field = key.substr(del_prefix.size());
                auto it = orig.find(field);
                if (!kv.value().is_array())
                    return fail(errc::bad_request, "invalid value for " + std::string(key) + ": must be a list");
                if (it != orig.end() && it->value().is_array()) {
                    auto& arr = it->value().get_array();
                    for (std::size_t j = arr.size(); j-- > 0;)
                        for (auto& d : kv.value().get_array())
                            if (json_equal(arr[j], d)) {
                                arr.erase(arr.begin() + static_cast<std::ptrdiff_t>(j));
                                break;
                            }
                }
            }
            // $retainKeys, $setElementOrder/<field> and "$patch": merge need nothing here.
            continue;
        }
        const auto& pv = kv.value();
        if (pv.is_null()) {
            orig.erase(key);
            continue;
        }
        auto it = orig.find(key);
        if (it != orig.end() && it->value().is_object() && pv.is_object()) {
            auto merged = merge_map(it->value().get_object(), pv.get_object());
            if (!merged) return fail(std::move(merged.error()));
            if (*merged) it->value() = std::move(**merged);
            else orig.erase(it);
            continue;
        }
        if (pv.is_array()) {
            const json::array* oa = it != orig.end() && it->value().is_array() ? &it->value().get_array() : nullptr;
            auto st = strategy_for(key, oa, pv.get_array());
            if (st.kind != ListKind::replace) {
                static const json::array empty;
                auto merged = merge_list(key, oa ? *oa : empty, pv.get_array(), st);
                if (!merged) return fail(std::move(merged.error()));
                orig[key] = std::move(*merged);
                continue;
            }
            // Replaced lists may still carry {"$patch": "replace"}-style elements of objects.
            json::array out;
            for (auto& e : pv.get_array()) {
                if (e.is_object() && e.get_object().contains("$patch")) continue;
                auto v = fresh_value(key, e);
                if (!v) return fail(std::move(v.error()));
                if (*v) out.push_back(std::move(**v));
            }
            orig[key] = std::move(out);
            continue;
        }
        auto v = fresh_value(key, pv);
        if (!v) return fail(std::move(v.error()));
        if (*v) orig[key] = std::move(**v);
        else orig.erase(key);
    }
    return std::optional<json::object>{std::move(orig)};
}

}  // namespace

Result<json::value> apply_strategic_merge_patch(const json::value& target, const json::value& patch) {
    if (!patch.is_object()) return fail(errc::bad_request, "strategic merge patch must be a JSON object");
    json::object base = target.is_object() ? target.get_object() : json::object{};
    auto merged = merge_map(std::move(base), patch.get_object());
    if (!merged) return fail(std::move(merged.error()));
    if (!*merged) return json::value(json::object{});
    return json::value(std::move(**merged));
}

}  // namespace kubesandbox::proto
