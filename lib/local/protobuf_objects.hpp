// Decoding the Kubernetes protobuf encoding ("k8s\0" + runtime.Unknown) of the few kinds kubectl's
// typed clients create (kubectl create configmap/secret/namespace/serviceaccount), into the
// JSON the API server stores. Sans-IO.
#pragma once

#include <kubesandbox/error.hpp>

#include <boost/json/object.hpp>

#include <string_view>

namespace kubesandbox::local {

// errc::unsupported_media_type for kinds it does not know, errc::bad_request for bad bytes.
Result<boost::json::object> decode_protobuf_object(std::string_view body);

}  // namespace kubesandbox::local
