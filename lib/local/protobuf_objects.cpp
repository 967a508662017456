#include "local/protobuf_objects.hpp"

#include "proto/kubeconfig.hpp"

#include <boost/json/array.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace json = boost::json;

namespace kubesandbox::local {
namespace {

// One protobuf field as read from the wire.
struct Field {
    std::uint32_t number = 0;
    int wire = 0;
    std::uint64_t varint = 0;
    std::string_view bytes;
};

class Reader {
public:
    explicit Reader(std::string_view data) : data_(data) {}
    bool done() const { return pos_ >= data_.size(); }
    bool ok() const { return ok_; }

    std::optional<Field> next() {
        auto key = varint();
        if (!key) return std::nullopt;
        Field f;
        f.number = static_cast<std::uint32_t>(*key >> 3);
        f.wire = static_cast<int>(*key & 7);
        switch (f.wire) {
            case 0: {
                auto v = varint();
                if (!v) return std::nullopt;
                f.varint = *v;
                break;
            }
            case 1:
                return skip(8, f);
            case 5:
                return skip(4, f);
            case 2: {
                auto len = varint();
                if (!len || *len > data_.size() - pos_) return fail();
                f.bytes = data_.substr(pos_, static_cast<std::size_t>(*len));
                pos_ += static_cast<std::size_t>(*len);
                break;
            }
            default:
                return fail();
        }
        return f;
    }

private:
    std::optional<Field> fail() {
        ok_ = false;
        return std::nullopt;
    }
    std::optional<Field> skip(std::size_t n, Field f) {
        if (n > data_.size() - pos_) return fail();
        pos_ += n;
        return f;
    }
    std::optional<std::uint64_t> varint() {
        std::uint64_t v = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            if (pos_ >= data_.size()) {
                ok_ = false;
                return std::nullopt;
            }
            auto b = static_cast<unsigned char>(data_[pos_++]);
            v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
            if (!(b & 0x80)) return v;
        }
        ok_ = false;
        return std::nullopt;
    }

    std::string_view data_;
    std::size_t pos_ = 0;
    bool ok_ = true;
};

// Calls `each` for every field; false when the bytes are malformed.
bool for_each(std::string_view data, const std::function<bool(const Field&)>& each) {
    Reader r(data);
    while (!r.done()) {
        auto f = r.next();
        if (!f) return false;
        if (!each(*f)) return false;
    }
    return r.ok();
}

// map<string,string|bytes> entry: key = 1, value = 2.
bool map_entry(std::string_view data, json::object& into, bool base64) {
    std::string key, value;
    bool ok = for_each(data, [&](const Field& f) {
        if (f.wire != 2) return true;
        if (f.number == 1) key = f.bytes;
        else if (f.number == 2) value = f.bytes;
        return true;
    });
    into[key] = base64 ? proto::base64_encode(value) : value;
    return ok;
}

json::object& sub(json::object& o, std::string_view key) {
    if (!o.contains(key) || !o[key].is_object()) o[key] = json::object{};
    return o[key].as_object();
}
json::array& arr(json::object& o, std::string_view key) {
    if (!o.contains(key) || !o[key].is_array()) o[key] = json::array{};
    return o[key].as_array();
}

bool owner_reference(std::string_view data, json::array& into) {
    json::object ref;
    bool ok = for_each(data, [&](const Field& f) {
        switch (f.number) {
            case 1:
                ref["kind"] = f.bytes;
                break;
            case 3:
                ref["name"] = f.bytes;
                break;
            case 4:
                ref["uid"] = f.bytes;
                break;
            case 5:
                ref["apiVersion"] = f.bytes;
                break;
            case 6:
                ref["controller"] = f.varint != 0;
                break;
            case 7:
                ref["blockOwnerDeletion"] = f.varint != 0;
                break;
            default:
                break;
        }
        return true;
    });
    into.push_back(std::move(ref));
    return ok;
}

bool object_meta(std::string_view data, json::object& meta) {
    return for_each(data, [&](const Field& f) {
        if (f.wire != 2) return true;
        switch (f.number) {
            case 1:
                meta["name"] = f.bytes;
                return true;
            case 2:
                meta["generateName"] = f.bytes;
                return true;
            case 3:
                meta["namespace"] = f.bytes;
                return true;
            case 6:
                meta["resourceVersion"] = f.bytes;
                return true;
            case 11:
                return map_entry(f.bytes, sub(meta, "labels"), false);
            case 12:
                return map_entry(f.bytes, sub(meta, "annotations"), false);
            case 13:
                return owner_reference(f.bytes, arr(meta, "ownerReferences"));
            case 14:
                arr(meta, "finalizers").push_back(json::string(f.bytes));
                return true;
            default:
                return true;
        }
    });
}

bool decode_kind(std::string_view kind, std::string_view raw, json::object& o) {
    return for_each(raw, [&](const Field& f) {
        // Looked up per field: a field before metadata (or metadata twice) adds keys to `o`,
        // which may move its members.
        if (f.number == 1 && f.wire == 2) return object_meta(f.bytes, sub(o, "metadata"));
        if (kind == "ConfigMap") {
            if (f.number == 2 && f.wire == 2) return map_entry(f.bytes, sub(o, "data"), false);
            if (f.number == 3 && f.wire == 2) return map_entry(f.bytes, sub(o, "binaryData"), true);
            if (f.number == 4 && f.wire == 0) o["immutable"] = f.varint != 0;
        } else if (kind == "Secret") {
            if (f.number == 2 && f.wire == 2) return map_entry(f.bytes, sub(o, "data"), true);
            if (f.number == 3 && f.wire == 2) o["type"] = f.bytes;
            if (f.number == 4 && f.wire == 2) return map_entry(f.bytes, sub(o, "stringData"), false);
            if (f.number == 5 && f.wire == 0) o["immutable"] = f.varint != 0;
        } else if (kind == "Namespace") {
            if (f.number == 2 && f.wire == 2)
                return for_each(f.bytes, [&](const Field& g) {
                    if (g.number == 1 && g.wire == 2)
                        arr(sub(o, "spec"), "finalizers").push_back(json::string(g.bytes));
                    return true;
                });
        } else if (kind == "ServiceAccount") {
            if (f.number == 3 && f.wire == 2) {
                json::object ref;
                bool ok = for_each(f.bytes, [&](const Field& g) {
                    if (g.number == 1 && g.wire == 2) ref["name"] = g.bytes;
                    return true;
                });
                arr(o, "imagePullSecrets").push_back(std::move(ref));
                return ok;
            }
            if (f.number == 4 && f.wire == 0) o["automountServiceAccountToken"] = f.varint != 0;
        }
        return true;
    });
}

}  // namespace

Result<json::object> decode_protobuf_object(std::string_view body) {
    static constexpr std::string_view magic("k8s\0", 4);
    if (body.substr(0, 4) != magic) return fail(errc::bad_request, "provided protobuf data is missing the k8s prefix");
    std::string api_version, kind;
    std::string_view raw;
    bool ok = for_each(body.substr(4), [&](const Field& f) {
        if (f.number == 1 && f.wire == 2)
            return for_each(f.bytes, [&](const Field& g) {
                if (g.number == 1 && g.wire == 2) api_version = g.bytes;
                if (g.number == 2 && g.wire == 2) kind = g.bytes;
                return true;
            });
        if (f.number == 2 && f.wire == 2) raw = f.bytes;
        return true;
    });
    if (!ok) return fail(errc::bad_request, "unable to decode the protobuf body");
    if (kind != "ConfigMap" && kind != "Secret" && kind != "Namespace" && kind != "ServiceAccount")
        return fail(errc::unsupported_media_type,
                    "the local cluster decodes protobuf only for ConfigMap, Secret, Namespace and ServiceAccount; send "
                    "application/json");
    json::object o{{"apiVersion", api_version}, {"kind", kind}, {"metadata", json::object{}}};
    if (!decode_kind(kind, raw, o)) return fail(errc::bad_request, "unable to decode the protobuf " + kind);
    return o;
}

}  // namespace kubesandbox::local
