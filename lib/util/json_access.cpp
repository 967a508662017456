#include "util/json_access.hpp"

namespace kubesandbox::util {

namespace json = boost::json;

const json::object* object_at(const json::object& o, std::string_view key) {
    auto* v = o.if_contains(key);
    return v && v->is_object() ? &v->get_object() : nullptr;
}

json::object* object_at(json::object& o, std::string_view key) {
    auto* v = o.if_contains(key);
    return v && v->is_object() ? &v->get_object() : nullptr;
}

const json::array* array_at(const json::object& o, std::string_view key) {
    auto* v = o.if_contains(key);
    return v && v->is_array() ? &v->get_array() : nullptr;
}

std::string string_at(const json::object& o, std::string_view key) {
    auto* v = o.if_contains(key);
    return v && v->is_string() ? std::string(v->get_string()) : std::string();
}

std::string string_at(const json::object* o, std::string_view key) { return o ? string_at(*o, key) : std::string(); }

std::optional<std::int64_t> int_at(const json::object* o, std::string_view key) {
    if (!o) return std::nullopt;
    auto* v = o->if_contains(key);
    if (!v) return std::nullopt;
    if (v->is_int64()) return v->get_int64();
    if (v->is_uint64() && v->get_uint64() <= static_cast<std::uint64_t>(INT64_MAX))
        return static_cast<std::int64_t>(v->get_uint64());
    return std::nullopt;
}

const json::object& metadata_of(const json::object& o) {
    static const json::object empty;
    auto* m = object_at(o, "metadata");
    return m ? *m : empty;
}

std::string label_of(const json::object& o, std::string_view key) {
    return string_at(object_at(metadata_of(o), "labels"), key);
}

std::string annotation_of(const json::object& o, std::string_view key) {
    return string_at(object_at(metadata_of(o), "annotations"), key);
}

json::object to_json_object(const std::map<std::string, std::string>& m) {
    json::object o;
    for (const auto& [k, v] : m) o[k] = v;
    return o;
}

}  // namespace kubesandbox::util
