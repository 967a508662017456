// Tolerant accessors for Kubernetes objects as Boost.JSON: a missing or mistyped field reads as
// empty instead of throwing, because remote objects are never trusted to have our shape.
#pragma once

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace kubesandbox::util {

const boost::json::object* object_at(const boost::json::object& o, std::string_view key);
boost::json::object* object_at(boost::json::object& o, std::string_view key);
const boost::json::array* array_at(const boost::json::object& o, std::string_view key);
std::string string_at(const boost::json::object& o, std::string_view key);
std::string string_at(const boost::json::object* o, std::string_view key);  // null reads as empty
std::optional<std::int64_t> int_at(const boost::json::object* o, std::string_view key);

// metadata, or an empty object when there is none.
const boost::json::object& metadata_of(const boost::json::object& o);
std::string label_of(const boost::json::object& o, std::string_view key);
std::string annotation_of(const boost::json::object& o, std::string_view key);

boost::json::object to_json_object(const std::map<std::string, std::string>& m);

}  // namespace kubesandbox::util
