#include "local/agent_controller.hpp"

#include "local/agent_controller_core.hpp"
#include "local/mirror.hpp"
#include "proto/patch.hpp"
#include "util/json_access.hpp"
#include "util/time_format.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <array>
#include <functional>
#include <map>
#include <optional>
#include <vector>

namespace kubesandbox::local {

namespace asio = boost::asio;
namespace json = boost::json;
using namespace agents;
using util::metadata_of;
using util::object_at;
using util::string_at;

namespace {

constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);

enum Kind { claims, pools, templates, sandboxes, pods, services, kind_count };

ResourcePath collection(Kind k) {
    switch (k) {
        case claims:
            return {"extensions.agents.x-k8s.io", "v1beta1", "sandboxclaims", "", ""};
        case pools:
            return {"extensions.agents.x-k8s.io", "v1beta1", "sandboxwarmpools", "", ""};
        case templates:
            return {"extensions.agents.x-k8s.io", "v1beta1", "sandboxtemplates", "", ""};
        case sandboxes:
            return {"agents.x-k8s.io", "v1beta1", "sandboxes", "", ""};
        case services:
            return {"", "v1", "services", "", ""};
        default:
            return {"", "v1", "pods", "", ""};
    }
}

ResourcePath object_path(Kind k, const std::string& ns, const std::string& name) {
    ResourcePath p = collection(k);
    p.namespace_name = ns;
    p.name = name;
    return p;
}

bool deleting(const json::object& o) { return metadata_of(o).contains("deletionTimestamp"); }

json::object runtime_template(const std::string& name, const std::string& image) {
    json::object container{{"name", "runtime"},
                           {"image", image},
                           {"ports", json::array{json::object{{"containerPort", 8888}}}},
                           {"readinessProbe", json::object{{"httpGet", json::object{{"path", "/"}, {"port", 8888}}},
                                                           {"periodSeconds", 1}}}};
    return json::object{
        {"apiVersion", extensions_api},
        {"kind", "SandboxTemplate"},
        {"metadata", json::object{{"name", name}, {"namespace", "default"}}},
        {"spec", json::object{{"podTemplate", json::object{{"spec", json::object{{"containers", json::array{container}},
                                                                                 {"restartPolicy", "OnFailure"}}}}},
                              {"envVarsInjectionPolicy", "Allowed"}}}};
}

}  // namespace

struct AgentController::Impl : std::enable_shared_from_this<Impl> {
    Impl(asio::any_io_executor ex, KubeClient c, AgentControllerOptions o, Logger l)
        : executor(std::move(ex)), client(std::move(c)), options(o), logger(std::move(l)), wake(executor) {}

    asio::any_io_executor executor;
    KubeClient client;
    AgentControllerOptions options;
    Logger logger;
    asio::steady_timer wake;
    std::array<ObjectCache, kind_count> cache;
    std::vector<std::shared_ptr<ListWatch>> watches;
    bool dirty = true;
    bool stopped = false;

    void log(const std::string& line) { logger.warning("local cluster agent-sandbox controller: " + line); }

    void poke() {
        dirty = true;
        wake.cancel();
    }

    asio::awaitable<void> watch_loop(Kind kind) {
        WatchOptions options;
        if (kind == pods) options.label_selector = name_hash_label;
        auto watch = std::make_shared<ListWatch>(client, collection(kind), options);
        watches.push_back(watch);
        auto self = shared_from_this();
        co_await mirror(self, watch, cache[kind], stopped, [this] { poke(); });
    }

    // Time-based work (shutdownTime) is noticed within a second.
    asio::awaitable<void> run_reconciler() {
        co_await reconcile_loop(shared_from_this(), wake, dirty, stopped, std::chrono::seconds(1),
                                [this] { return reconcile_all(); });
    }

    asio::awaitable<void> reconcile_all() {
        const auto now = ObjectCache::Clock::now();
        for (auto& c : cache) c.forget_unconfirmed(now, unconfirmed_max_age);
        co_await reconcile_sandboxes();
        co_await reconcile_claims();
        co_await reconcile_pools();
    }

    const json::object* find(Kind k, const std::string& key) const {
        auto it = cache[k].find(key);
        return it == cache[k].end() ? nullptr : &it->second;
    }

    asio::awaitable<const json::object*> create(Kind k, const std::string& ns, json::object body) {
        ResourcePath p = collection(k);
        p.namespace_name = ns;
        auto created = co_await client.create(p, std::move(body));
        if (!created) {
            if (!created.error().is(errc::already_exists)) log("create " + p.str() + ": " + created.error().describe());
            co_return nullptr;
        }
        co_return cache[k].remember(std::move(*created));
    }

    asio::awaitable<const json::object*> patch(Kind k, const std::string& key, json::object body, bool status) {
        auto slash = key.find('/');
        ResourcePath p = object_path(k, key.substr(0, slash), key.substr(slash + 1));
        if (status) p.subresource = "status";
        auto patched = co_await client.patch(p, json::value(std::move(body)), PatchType::merge);
        if (!patched) {
            if (!patched.error().is(errc::not_found) && !patched.error().is(errc::conflict))
                log("patch " + p.str() + ": " + patched.error().describe());
            co_return nullptr;
        }
        co_return cache[k].remember(std::move(*patched));
    }

    asio::awaitable<void> remove(Kind k, const std::string& key) {
        auto slash = key.find('/');
        ResourcePath p = object_path(k, key.substr(0, slash), key.substr(slash + 1));
        auto removed = co_await client.remove(p);
        if (!removed && !removed.error().is(errc::not_found))
            log("delete " + p.str() + ": " + removed.error().describe());
    }

    asio::awaitable<void> write_status(Kind k, const std::string& key, json::object status) {
        const json::object* current = find(k, key);
        if (!current) co_return;
        const json::object* old = object_at(*current, "status");
        if (old && *old == status) co_return;
        // A merge patch keeps what it does not name: fields the status no longer has (a claim's
        // sandbox once unbound, a Sandbox's pod IPs once its pod is gone) are named as null.
        json::value change = old ? proto::merge_patch_between(*old, status) : json::value(std::move(status));
        json::object body{{"status", std::move(change)}};
        co_await patch(k, key, std::move(body), true);
    }

    static std::int64_t now_seconds() {
        return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
            .count();
    }

    asio::awaitable<void> reconcile_sandboxes() {
        std::vector<std::string> keys;
        for (const auto& [key, sb] : cache[sandboxes]) keys.push_back(key);
        const std::string now = util::now_rfc3339();
        for (const auto& key : keys) {
            // A copy: watch events may drop cache entries while this coroutine waits.
            const json::object* cached = find(sandboxes, key);
            if (!cached || deleting(*cached)) continue;
            const json::object sandbox_copy = *cached;
            const json::object* sb = &sandbox_copy;
            auto shutdown = shutdown_time(*sb, false);
            const bool expired = shutdown && *shutdown <= now_seconds();
            const json::object* pod = find(pods, key);
            const std::string uid = string_at(metadata_of(*sb), "uid");
            if (pod && !controlled_by(*pod, uid)) pod = nullptr;
            if (expired) {
                if (pod) co_await remove(pods, key);
                if (string_at(object_at(*sb, "spec"), "shutdownPolicy") == "Delete") {
                    co_await remove(sandboxes, key);
                    continue;
                }
                pod = nullptr;
            } else if (!pod && !find(pods, key)) {
                json::object manifest = pod_for_sandbox(*sb);
                pod = co_await create(pods, string_at(metadata_of(*sb), "namespace"), std::move(manifest));
            }
            // spec.service: the headless Service named after the Sandbox (deleted when false or expired).
            const json::object* service = find(services, key);
            if (service && !controlled_by(*service, uid)) service = nullptr;
            const auto wants_service = sandbox_wants_service(*sb);
            if (service && (expired || wants_service == false)) {
                co_await remove(services, key);
                service = nullptr;
            } else if (!service && !expired && wants_service.value_or(false) && !find(services, key)) {
                service = co_await create(services, string_at(metadata_of(*sb), "namespace"), service_for_sandbox(*sb));
            }
            // Looked up again: watch events during the requests above may have dropped the entries
            // these pointed at.
            auto owned = [&](Kind k) -> const json::object* {
                const json::object* o = find(k, key);
                return o && controlled_by(*o, uid) ? o : nullptr;
            };
            if (pod) pod = owned(pods);
            if (service) service = owned(services);
            const json::object* current = find(sandboxes, key);
            if (!current) continue;
            co_await write_status(sandboxes, key, sandbox_status(*current, pod, expired, now, service));
        }
    }

    // An object from the cache or, on a miss, from the API: a claim may arrive on its watch
    // before the pool it names arrives on another, and a miss must not fail it.
    asio::awaitable<const json::object*> lookup(Kind k, std::string key) {
        if (const json::object* hit = find(k, key)) co_return hit;
        auto slash = key.find('/');
        if (slash == std::string::npos || slash + 1 == key.size()) co_return nullptr;
        auto got = co_await client.get(object_path(k, key.substr(0, slash), key.substr(slash + 1)));
        if (!got) co_return nullptr;
        co_return cache[k].remember(std::move(*got));
    }

    // The template a claim needs (its own, or its pool's).
    asio::awaitable<const json::object*> template_for(json::object claim, const json::object* pool) {
        std::string template_name;
        claim_pool_name(claim, template_name);
        if (template_name.empty() && pool) {
            const json::object* spec = object_at(*pool, "spec");
            template_name = string_at(spec ? object_at(*spec, "sandboxTemplateRef") : nullptr, "name");
        }
        co_return co_await lookup(templates, string_at(metadata_of(claim), "namespace") + "/" + template_name);
    }

    asio::awaitable<void> reconcile_claims() {
        std::vector<std::string> keys;
        for (const auto& [key, c] : cache[claims]) keys.push_back(key);
        const std::string now = util::now_rfc3339();
        for (const auto& key : keys) {
            // A copy: watch events may drop cache entries while this coroutine waits.
            const json::object* cached = find(claims, key);
            if (!cached || deleting(*cached)) continue;
            const json::object claim_copy = *cached;
            const json::object* claim = &claim_copy;
            const auto& md = metadata_of(*claim);
            const std::string ns = string_at(md, "namespace");
            const std::string uid = string_at(md, "uid");
            // The bound sandbox: status, then the adoption annotation, then the cold-start name.
            const json::object* sandbox = nullptr;
            const json::object* status = object_at(*claim, "status");
            for (std::string name : {string_at(status ? object_at(*status, "sandbox") : nullptr, "name"),
                                     util::annotation_of(*claim, sandbox_name_annotation), string_at(md, "name")}) {
                if (name.empty()) continue;
                const json::object* candidate = find(sandboxes, ns + "/" + name);
                if (candidate && controlled_by(*candidate, uid)) {
                    sandbox = candidate;
                    break;
                }
            }
            auto shutdown = shutdown_time(*claim, true);
            if (shutdown && *shutdown <= now_seconds()) {
                if (sandbox) co_await remove(sandboxes, object_key(*sandbox));
                const json::object* claim_spec = object_at(*claim, "spec");
                std::string policy =
                    string_at(claim_spec ? object_at(*claim_spec, "lifecycle") : nullptr, "shutdownPolicy");
                if (policy == "Delete" || policy == "DeleteForeground") {
                    co_await remove(claims, key);
                } else {
                    co_await write_status(claims, key,
                                          claim_status(*claim, nullptr, "ClaimExpired", "Claim expired", now));
                }
                continue;
            }
            if (!sandbox) {
                // Copies: a watch event may drop cache entries while this coroutine waits.
                std::string template_name;
                std::string pool_name = claim_pool_name(*claim, template_name);
                std::optional<json::object> pool, tmpl;
                if (!pool_name.empty()) {
                    if (const json::object* p = co_await lookup(pools, ns + "/" + pool_name)) pool = *p;
                }
                if (const json::object* t = co_await template_for(claim_copy, pool ? &*pool : nullptr)) tmpl = *t;
                if (!find(claims, key)) continue;
                if (auto failure = claim_failure(*claim, pool ? &*pool : nullptr, tmpl ? &*tmpl : nullptr)) {
                    co_await write_status(claims, key,
                                          claim_status(*claim, nullptr, failure->reason, failure->message, now));
                    continue;
                }
                if (pool && !claim_forces_cold(*claim)) {
                    // Pool sandboxes still starting (no pod IP yet): a young claim waits for them
                    // a little before it falls back to a cold start.
                    if (pool_starting(*pool, ns) && claim_age_seconds(*claim) < warm_grace_seconds) continue;
                    sandbox = co_await adopt(*claim, *pool);
                }
                if (!find(claims, key)) continue;
                if (!sandbox && tmpl) {
                    json::object manifest = cold_sandbox(*claim, *tmpl);
                    sandbox = co_await create(sandboxes, ns, std::move(manifest));
                }
                if (!find(claims, key)) continue;
            }
            co_await write_status(
                claims, key, claim_status(*claim, sandbox, "SandboxCreatePending", "Sandbox is being created", now));
        }
    }

    static constexpr std::int64_t warm_grace_seconds = 5;

    static std::int64_t claim_age_seconds(const json::object& claim) {
        auto created = util::parse_rfc3339(string_at(metadata_of(claim), "creationTimestamp"));
        if (!created) return warm_grace_seconds;
        return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now() - *created).count();
    }

    // The pool has sandboxes without a pod IP yet, and none with one.
    bool pool_starting(const json::object& pool, const std::string& ns) const {
        const std::string uid = string_at(metadata_of(pool), "uid");
        bool starting = false;
        for (const auto& [key, sb] : cache[sandboxes]) {
            if (deleting(sb) || !controlled_by(sb, uid) || string_at(metadata_of(sb), "namespace") != ns) continue;
            if (!sandbox_pod_ips(sb).empty()) return false;
            starting = true;
        }
        return starting;
    }

    // Takes a pool Sandbox for the claim: Ready ones first, then the oldest with a pod IP.
    asio::awaitable<const json::object*> adopt(const json::object& claim_ref, const json::object& pool) {
        json::object claim = claim_ref;  // the cache may change under us
        const std::string pool_uid = string_at(metadata_of(pool), "uid");
        const json::object* best = nullptr;
        for (const auto& [key, sb] : cache[sandboxes]) {
            if (deleting(sb) || !controlled_by(sb, pool_uid) || sandbox_pod_ips(sb).empty()) continue;
            if (string_at(metadata_of(sb), "namespace") != string_at(metadata_of(claim), "namespace")) continue;
            if (!best) {
                best = &sb;
                continue;
            }
            bool ready = sandbox_ready(sb), best_ready = sandbox_ready(*best);
            if (ready != best_ready) {
                if (ready) best = &sb;
            } else if (string_at(metadata_of(sb), "creationTimestamp") <
                       string_at(metadata_of(*best), "creationTimestamp")) {
                best = &sb;
            }
        }
        if (!best) co_return nullptr;
        const json::object chosen = *best;
        const std::string sandbox_key = object_key(chosen);
        const std::string sandbox_name = string_at(metadata_of(chosen), "name");
        // The claim names its sandbox first (so a restart finishes the adoption), then the
        // Sandbox changes owner; its resourceVersion guards against a concurrent adoption.
        json::object annotate{
            {"metadata", json::object{{"annotations", json::object{{sandbox_name_annotation, sandbox_name}}}}}};
        if (!co_await patch(claims, object_key(claim), std::move(annotate), false)) co_return nullptr;
        json::object handover = adoption_patch(chosen, claim);
        const json::object* adopted = co_await patch(sandboxes, sandbox_key, std::move(handover), false);
        if (!adopted) co_return nullptr;
        // The running Pod gets the claim's metadata too.
        const json::object* spec = object_at(claim, "spec");
        if (const json::object* extra = spec ? object_at(*spec, "additionalPodMetadata") : nullptr) {
            json::object pod_md;
            for (const char* kind : {"labels", "annotations"}) {
                if (const json::object* m = object_at(*extra, kind)) pod_md[kind] = *m;
            }
            json::object body{{"metadata", std::move(pod_md)}};
            co_await patch(pods, sandbox_key, std::move(body), false);
        }
        co_return find(sandboxes, sandbox_key);
    }

    asio::awaitable<void> reconcile_pools() {
        std::vector<std::string> keys;
        for (const auto& [key, p] : cache[pools]) keys.push_back(key);
        for (const auto& key : keys) {
            const json::object* pool = find(pools, key);
            if (!pool || deleting(*pool)) continue;
            const auto& md = metadata_of(*pool);
            const std::string ns = string_at(md, "namespace");
            const std::string uid = string_at(md, "uid");
            const json::object* spec = object_at(*pool, "spec");
            const std::int64_t replicas = std::max<std::int64_t>(0, util::int_at(spec, "replicas").value_or(1));
            const json::object* tmpl =
                find(templates, ns + "/" + string_at(spec ? object_at(*spec, "sandboxTemplateRef") : nullptr, "name"));
            std::vector<std::string> owned;
            int ready = 0;
            for (const auto& [sb_key, sb] : cache[sandboxes]) {
                if (deleting(sb) || !controlled_by(sb, uid)) continue;
                owned.push_back(sb_key);
                if (sandbox_ready(sb)) ++ready;
            }
            if (tmpl) {
                json::object tmpl_copy = *tmpl;
                json::object pool_copy = *pool;
                for (auto n = static_cast<std::int64_t>(owned.size()); n < replicas; ++n) {
                    if (auto* created = co_await create(sandboxes, ns, warm_sandbox(pool_copy, tmpl_copy)))
                        owned.push_back(object_key(*created));
                }
            }
            for (auto n = static_cast<std::int64_t>(owned.size()); n > replicas; --n) {
                co_await remove(sandboxes, owned.back());
                owned.pop_back();
            }
            if (const json::object* current = find(pools, key))
                co_await write_status(pools, key, pool_status(*current, static_cast<int>(owned.size()), ready));
        }
    }

    asio::awaitable<void> create_defaults(std::function<void()> done) {
        auto self = shared_from_this();
        struct Done {
            std::function<void()>& f;
            ~Done() {
                if (f) f();
            }
        } signal{done};
        for (const auto& [name, image] :
             {std::pair<std::string, std::string>{"python-runtime", "python-runtime-sandbox:latest"},
              {"busybox-runtime", "busybox-runtime"}}) {
            ResourcePath templates_path = collection(templates);
            templates_path.namespace_name = "default";
            auto t = co_await client.create(templates_path, runtime_template(name, image));
            if (!t && !t.error().is(errc::already_exists))
                log("default template " + name + ": " + t.error().describe());
            ResourcePath pools_path = collection(pools);
            pools_path.namespace_name = "default";
            json::object pool{{"apiVersion", extensions_api},
                              {"kind", "SandboxWarmPool"},
                              {"metadata", json::object{{"name", name}, {"namespace", "default"}}},
                              {"spec", json::object{{"replicas", options.default_pool_replicas},
                                                    {"sandboxTemplateRef", json::object{{"name", name}}}}}};
            auto p = co_await client.create(pools_path, std::move(pool));
            if (!p && !p.error().is(errc::already_exists))
                log("default warm pool " + name + ": " + p.error().describe());
        }
    }
};

AgentController::AgentController(asio::any_io_executor executor, KubeClient client, AgentControllerOptions options,
                                 Logger logger)
    : impl_(std::make_shared<Impl>(std::move(executor), std::move(client), options, std::move(logger))) {}

AgentController::~AgentController() = default;

void AgentController::start(std::function<void()> defaults_created) {
    auto impl = impl_;
    if (impl->options.create_defaults) {
        asio::co_spawn(impl->executor, impl->create_defaults(std::move(defaults_created)), asio::detached);
    } else if (defaults_created) {
        defaults_created();
    }
    for (Kind k : {claims, pools, templates, sandboxes, pods, services})
        asio::co_spawn(impl->executor, impl->watch_loop(k), asio::detached);
    asio::co_spawn(impl->executor, impl->run_reconciler(), asio::detached);
}

void AgentController::stop() {
    impl_->stopped = true;
    impl_->wake.cancel();
    for (auto& w : impl_->watches) w->close();
}

}  // namespace kubesandbox::local
