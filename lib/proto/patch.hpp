// PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and strategic merge patch
// for built-in kinds. Used by the local cluster to apply patches and by clients for previews.
#pragma once

#include <cstddef>

#include <kubesandbox/error.hpp>

#include <boost/json/value.hpp>

namespace kubesandbox::proto {

// RFC 7386 merge patch: objects merge recursively, null deletes, arrays/scalars replace.
boost::json::value apply_merge_patch(const boost::json::value& target, const boost::json::value& patch);

// The merge patch that turns `from` into `to`: keys `to` lacks become null (removed), objects
// are compared key by key, anything else that differs is replaced. Exact unless `to` holds
// nulls of its own, which a merge patch cannot set.
boost::json::value merge_patch_between(const boost::json::value& from, const boost::json::value& to);

// RFC 6902 JSON patch. A malformed patch document -> errc::bad_request; a path that does not
// exist, a failed "test" and the like -> errc::invalid (message "the server rejected our
// request due to an error in our request", the detail in a cause of reason
// "UnexpectedServerResponse"), as the API server answers 422.
// Limits a patch cannot pass (request_entity_too_large): the operation count, and the bytes
// that copy operations add in total (each copy can double the document).
inline constexpr std::size_t max_json_patch_operations = 10000;
inline constexpr std::size_t max_json_patch_copy_bytes = 3 * 1024 * 1024;
Result<boost::json::value> apply_json_patch(const boost::json::value& target, const boost::json::value& patch);

// Strategic merge patch for built-in kinds: merge patch plus keyed merging of known lists
// (containers/initContainers/ephemeralContainers/volumes/env by "name", volumeMounts by
// "mountPath", container ports by "containerPort" (service ports by "port"), conditions by
// "type", ownerReferences by "uid", finalizers as a set), "$patch": delete/replace/merge,
// "$deleteFromPrimitiveList/<field>"; "$retainKeys" and "$setElementOrder/<field>" are
// accepted and ignored. Errors -> errc::bad_request.
Result<boost::json::value> apply_strategic_merge_patch(const boost::json::value& target,
                                                       const boost::json::value& patch);

// JSON equality with numbers compared by value (1 == 1.0), as RFC 6902 "test" requires.
bool json_equal(const boost::json::value& a, const boost::json::value& b);

}  // namespace kubesandbox::proto
