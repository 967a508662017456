// KubeClient's typed operations: CRUD, list and raw requests over the transport
// (transport.cpp), Status bodies turned into typed errors.
#include <kubesandbox/kube_client.hpp>

#include "kube/client_impl.hpp"
#include "proto/status.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

namespace kubesandbox {

namespace asio = boost::asio;
namespace json = boost::json;

// ---------------------------------------------------------------------------------------------
// Typed operations

namespace {

Error error_of(const kube::RawResponse& r) {
    return proto::error_from_response(r.status, r.content_type, r.body, r.retry_after);
}

// Whether `existing` carries every label and annotation of the object we tried to create:
// the generic "is it ours" check before a 409 after a lost response counts as success.
bool carries_our_metadata(const json::object& sent, const json::object& existing) {
    const json::value* sm = sent.if_contains("metadata");
    const json::value* em = existing.if_contains("metadata");
    if (!sm || !sm->is_object()) return true;
    for (const char* field : {"labels", "annotations"}) {
        const json::value* ours = sm->get_object().if_contains(field);
        if (!ours || !ours->is_object()) continue;
        const json::value* theirs = em && em->is_object() ? em->get_object().if_contains(field) : nullptr;
        for (const auto& kv : ours->get_object()) {
            if (!theirs || !theirs->is_object()) return false;
            const json::value* v = theirs->get_object().if_contains(kv.key());
            if (!v || *v != kv.value()) return false;
        }
    }
    return true;
}

std::string metadata_name(const json::object& body) {
    if (auto* md = body.if_contains("metadata"); md && md->is_object())
        if (auto* n = md->get_object().if_contains("name"); n && n->is_string()) return std::string(n->get_string());
    return {};
}

// Merge and strategic-merge patches converge to the same object when replayed; a JSON patch
// (add to a list, move, ...) may not, unless a "test" op guards it.
bool patch_is_idempotent(const json::value& body, PatchType type) {
    if (type != PatchType::json) return true;
    if (!body.is_array()) return false;
    for (const auto& op : body.get_array()) {
        if (!op.is_object()) continue;
        if (auto* o = op.get_object().if_contains("op"); o && o->is_string() && o->get_string() == "test") return true;
    }
    return false;
}

}  // namespace

KubeClient::KubeClient(asio::any_io_executor executor, KubeConfig config, KubeClientOptions options)
    : impl_(std::make_shared<Impl>(std::move(executor), std::move(config), std::move(options))) {}
KubeClient::KubeClient(KubeClient&&) noexcept = default;
KubeClient& KubeClient::operator=(KubeClient&&) noexcept = default;
KubeClient::~KubeClient() = default;

const KubeConfig& KubeClient::config() const { return impl_->config; }
const KubeClientOptions& KubeClient::options() const { return impl_->options; }
asio::any_io_executor KubeClient::get_executor() const { return impl_->executor; }

asio::awaitable<Result<json::object>> KubeClient::get(ResourcePath path) {
    kube::RawRequest raw_request{"GET", path.str(), {}, {}, true};
    auto r = co_await impl_->execute(std::move(raw_request));
    if (!r) co_return fail(r.error());
    if (r->status >= 300) co_return fail(error_of(*r));
    co_return proto::decode_object(r->body);
}

asio::awaitable<Result<json::object>> KubeClient::create(ResourcePath collection, json::object body,
                                                         CreateOptions options) {
    const std::string name = metadata_name(body);
    if (options.idempotent && name.empty())
        co_return fail(errc::invalid_argument,
                       "an idempotent create needs metadata.name: a retried generateName create could make a "
                       "second object");
    std::string target = collection.str();
    if (!options.field_manager.empty()) target += "?fieldManager=" + proto::url_encode(options.field_manager);
    std::string serialized = json::serialize(body);
    kube::RawRequest raw_request{"POST", target, std::move(serialized), "application/json", options.idempotent};
    auto r = co_await impl_->execute(std::move(raw_request));
    if (!r) co_return fail(r.error());
    if (r->status >= 300) {
        Error e = error_of(*r);
        if (options.idempotent && r->attempt > 0 && e.is(errc::already_exists)) {
            // A retry hit AlreadyExists: most likely our earlier attempt created the object and
            // its response was lost (or came back as a 5xx). It is ours if it carries our labels
            // and annotations (callers put an owner or creation token there); else it is not.
            const ResourcePath object_path = collection.with_name(name);
            auto existing = co_await get(object_path);
            if (existing && carries_our_metadata(body, *existing)) co_return std::move(*existing);
        }
        co_return fail(std::move(e));
    }
    co_return proto::decode_object(r->body);
}

asio::awaitable<Result<json::object>> KubeClient::replace(ResourcePath path, json::object body) {
    kube::RawRequest raw_request{"PUT", path.str(), json::serialize(body), "application/json", true};
    auto r = co_await impl_->execute(std::move(raw_request));
    if (!r) co_return fail(r.error());
    if (r->status >= 300) co_return fail(error_of(*r));
    co_return proto::decode_object(r->body);
}

asio::awaitable<Result<json::object>> KubeClient::patch(ResourcePath path, json::value body, PatchType type) {
    kube::RawRequest raw_request{"PATCH", path.str(), json::serialize(body),
                                 std::string(proto::patch_content_type(type)), patch_is_idempotent(body, type)};
    auto r = co_await impl_->execute(std::move(raw_request));
    if (!r) co_return fail(r.error());
    if (r->status >= 300) co_return fail(error_of(*r));
    co_return proto::decode_object(r->body);
}

asio::awaitable<Result<DeleteResult>> KubeClient::remove(ResourcePath path, DeleteOptions options) {
    kube::RawRequest raw_request{"DELETE", path.str(), proto::delete_body(options), "application/json", true};
    auto r = co_await impl_->execute(std::move(raw_request));
    if (!r) co_return fail(r.error());
    DeleteResult out;
    if (r->status == 404) {
        Error e = error_of(*r);
        // A 404 for the URL itself (resource type unknown) is not "already gone".
        if (e.message == "the server could not find the requested resource") co_return fail(std::move(e));
        out.found = false;
        co_return out;
    }
    if (r->status >= 300) co_return fail(error_of(*r));
    boost::system::error_code ec;
    out.body = json::parse(r->body, ec);
    if (ec) co_return fail(errc::invalid_response, "delete response is not valid JSON");
    co_return out;
}

asio::awaitable<Result<ListPage>> KubeClient::list(ResourcePath collection, ListOptions options) {
    kube::RawRequest raw_request{"GET", proto::list_target(collection, options), {}, {}, true};
    auto r = co_await impl_->execute(std::move(raw_request));
    if (!r) co_return fail(r.error());
    if (r->status >= 300) co_return fail(error_of(*r));
    co_return proto::decode_list(r->body);
}

asio::awaitable<Result<HttpResponse>> KubeClient::request(std::string method, std::string target, std::string body,
                                                          std::string content_type) {
    const bool idempotent = method == "GET" || method == "HEAD" || method == "PUT" || method == "DELETE";
    kube::RawRequest raw_request{std::string(method), std::string(target), std::move(body), std::string(content_type),
                                 idempotent};
    auto r = co_await impl_->execute(std::move(raw_request));
    if (!r) co_return fail(r.error());
    co_return HttpResponse{r->status, std::move(r->content_type), std::move(r->body)};
}

}  // namespace kubesandbox
