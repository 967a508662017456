// Raw mode's provider. All state lives in the cluster (labels/annotations); the only memory is
// the activity debounce table and a refill-in-progress flag.
#include <kubesandbox/raw_provider.hpp>

#include "proto/label_selector.hpp"
#include "proto/patch.hpp"
#include "proto/validation.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <openssl/rand.h>
#include <openssl/sha.h>

#include <cctype>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <mutex>
#include <unordered_map>

namespace kubesandbox {

namespace asio = boost::asio;
namespace json = boost::json;
using std::chrono::steady_clock;
using std::chrono::system_clock;

struct RawProvider::State {
    KubeClient client;
    RawProviderConfig config;
    std::mutex mutex{};
    std::unordered_map<std::string, steady_clock::time_point> last_patch{};
    bool refilling{false};
    bool refill_again{false};
    std::string config_hash{};  // label value of this config's warm pods

    State(KubeClient c, RawProviderConfig cfg) : client(std::move(c)), config(std::move(cfg)) {}
};

// Defined below; the sandboxes' on_activity callbacks reach it without a provider object.
static void record_activity_impl(const std::shared_ptr<RawProvider::State>& st, const std::string& id);

namespace {

using StatePtr = std::shared_ptr<RawProvider::State>;

// ---- small helpers -------------------------------------------------------------------------

std::string sha256_hex(std::string_view s, std::size_t chars) {
    unsigned char digest[SHA256_DIGEST_LENGTH];
    SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), digest);
    static const char* hex = "0123456789abcdef";
    std::string out;
    for (unsigned char b : digest) {
        out.push_back(hex[b >> 4]);
        out.push_back(hex[b & 15]);
    }
    out.resize(chars);
    return out;
}

std::string random_name() {
    static const char* alphabet = "bcdfghjklmnpqrstvwxz2456789";  // no vowels: no accidental words
    unsigned char bytes[10];
    if (RAND_bytes(bytes, sizeof bytes) != 1) {
        auto t = static_cast<unsigned>(steady_clock::now().time_since_epoch().count());
        for (auto& b : bytes) b = static_cast<unsigned char>(t = t * 1103515245u + 12345u);
    }
    std::string out = "ksb-";
    for (unsigned char b : bytes) out.push_back(alphabet[b % 27]);
    return out;
}

// A random token (hex) for the creation/claim annotations.
std::string random_token() {
    unsigned char bytes[16];
    if (RAND_bytes(bytes, sizeof bytes) != 1) {
        auto t = static_cast<unsigned>(steady_clock::now().time_since_epoch().count());
        for (auto& b : bytes) b = static_cast<unsigned char>(t = t * 1103515245u + 12345u);
    }
    static const char* hex = "0123456789abcdef";
    std::string out;
    for (unsigned char b : bytes) {
        out.push_back(hex[b >> 4]);
        out.push_back(hex[b & 15]);
    }
    return out;
}

// The part after "ksb-" of random_name(): 10 characters of its alphabet.
bool is_random_tail(std::string_view s) {
    if (s.size() != 10) return false;
    for (char c : s)
        if (std::string_view("bcdfghjklmnpqrstvwxz2456789").find(c) == std::string_view::npos) return false;
    return true;
}
bool is_random_pod_name(std::string_view s) { return s.substr(0, 4) == "ksb-" && is_random_tail(s.substr(4)); }

// Ends like a hashed name: 10 hex digits, alone or after a '-'.
bool looks_hashed(std::string_view s) {
    if (s.size() < 10) return false;
    for (char c : s.substr(s.size() - 10))
        if (!std::isxdigit(static_cast<unsigned char>(c)) || std::isupper(static_cast<unsigned char>(c))) return false;
    return s.size() == 10 || s[s.size() - 11] == '-';
}

std::string format_time(system_clock::time_point tp) {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(tp.time_since_epoch()).count();
    std::time_t secs = static_cast<std::time_t>(ms / 1000);
    std::tm tm{};
    gmtime_r(&secs, &tm);
    char buf[96];
    std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                  tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms % 1000));
    return buf;
}

std::string now_iso() { return format_time(system_clock::now()); }

// ISO-8601 / RFC 3339: "...Z", "...+00:00", optional fraction. nullopt when unparsable.
std::optional<system_clock::time_point> parse_time(std::string_view s) {
    if (s.size() < 19) return std::nullopt;
    std::tm tm{};
    int y, mo, d, h, mi, sec;
    std::string head(s.substr(0, 19));
    if (std::sscanf(head.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d", &y, &mo, &d, &h, &mi, &sec) != 6) return std::nullopt;
    if (y < 1970 || y > 2200) return std::nullopt;  // system_clock overflows past 2262
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = sec;
    std::time_t t = timegm(&tm);
    auto tp = system_clock::from_time_t(t);
    std::size_t i = 19;
    if (i < s.size() && s[i] == '.') {
        ++i;
        std::int64_t frac = 0;
        int digits = 0;
        while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
            if (digits < 6) {
                frac = frac * 10 + (s[i] - '0');
                ++digits;
            }
            ++i;
        }
        while (digits < 6) {
            frac *= 10;
            ++digits;
        }
        tp += std::chrono::microseconds(frac);
    }
    if (i < s.size()) {
        if (s[i] == 'Z' || s[i] == 'z') return tp;
        if ((s[i] == '+' || s[i] == '-') && s.size() >= i + 6) {
            int oh = 0, om = 0;
            std::string off(s.substr(i + 1, 5));
            if (std::sscanf(off.c_str(), "%2d:%2d", &oh, &om) != 2) return std::nullopt;
            auto offset = std::chrono::hours(oh) + std::chrono::minutes(om);
            if (s[i] == '+') tp -= offset;
            else tp += offset;
            return tp;
        }
        return std::nullopt;
    }
    return tp;
}

std::optional<std::int64_t> parse_int(std::string_view s) {
    if (s.empty()) return std::nullopt;
    std::int64_t v = 0;
    for (char c : s) {
        if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
        v = v * 10 + (c - '0');
        if (v > (std::int64_t{1} << 50)) return std::nullopt;
    }
    return v;
}

const json::object* obj_at(const json::object& o, std::string_view key) {
    auto it = o.find(key);
    if (it == o.end() || !it->value().is_object()) return nullptr;
    return &it->value().get_object();
}

std::string str_at(const json::object* o, std::string_view key) {
    if (!o) return {};
    auto it = o->find(key);
    if (it == o->end() || !it->value().is_string()) return {};
    return std::string(it->value().get_string());
}

const json::object* meta(const json::object& o) { return obj_at(o, "metadata"); }
std::string label_of(const json::object& pod, std::string_view key) {
    auto* m = meta(pod);
    return str_at(m ? obj_at(*m, "labels") : nullptr, key);
}
std::string annotation_of(const json::object& pod, std::string_view key) {
    auto* m = meta(pod);
    return str_at(m ? obj_at(*m, "annotations") : nullptr, key);
}

json::object string_map(const std::map<std::string, std::string>& m) {
    json::object o;
    for (const auto& [k, v] : m) o[k] = v;
    return o;
}

ResourcePath pods_path(const std::string& ns) {
    ResourcePath p;
    p.plural = "pods";
    p.namespace_name = ns;
    return p;
}
ResourcePath np_path(const std::string& ns) {
    ResourcePath p;
    p.group = "networking.k8s.io";
    p.plural = "networkpolicies";
    p.namespace_name = ns;
    return p;
}
ResourcePath ns_path() {
    ResourcePath p;
    p.plural = "namespaces";
    return p;
}
ResourcePath core_path(std::string plural, const std::string& ns) {
    ResourcePath p;
    p.plural = std::move(plural);
    p.namespace_name = ns;
    return p;
}

std::string np_name(const std::string& pod) { return pod + "-deny-all"; }

std::string namespace_for(const RawProviderConfig& cfg, const std::string& pod) {
    if (cfg.namespace_per_sandbox) return pod;
    return cfg.namespace_name;
}

const char* mode_value(const RawProviderConfig& cfg) { return cfg.namespace_per_sandbox ? "per-sandbox" : "shared"; }

// Selects this provider's objects: ours, and of its namespace mode only (a per-sandbox
// provider lists cluster-wide and must not touch shared-namespace sandboxes).
std::string scope_selector(const RawProviderConfig& cfg, std::map<std::string, std::string> sel) {
    sel[raw_keys::managed_by] = raw_keys::managed_by_value;
    if (cfg.namespace_per_sandbox) sel[raw_keys::namespace_mode] = "per-sandbox";
    std::string s = proto::format_label_selector(sel);
    // Shared mode: also objects from before the mode label existed.
    if (!cfg.namespace_per_sandbox) s += std::string(",") + raw_keys::namespace_mode + "!=per-sandbox";
    return s;
}

// Where a sandbox id points.
struct Target {
    std::string ns;
    std::string pod;
    std::optional<std::string> label;  // sandbox-id label of a caller id; nullopt for a pod reference
    std::string id;                    // canonical id: the caller id, or "<ns>/<pod>"
};

Result<Target> resolve_id(const RawProviderConfig& cfg, const std::string& id) {
    if (id.empty()) return fail(errc::invalid_argument, "sandbox id must not be empty");
    // A sandbox's id(): "<namespace>/<pod we named>".
    if (auto slash = id.find('/'); slash != std::string::npos) {
        std::string ns = id.substr(0, slash);
        std::string pod = id.substr(slash + 1);
        if (pod.rfind("ksb-", 0) == 0 && proto::validate_dns1123_label(pod).empty() &&
            proto::validate_dns1123_label(ns).empty()) {
            std::string want = namespace_for(cfg, pod);
            if (ns != want)
                return fail(errc::invalid_argument,
                            "sandbox " + id + " is in namespace " + ns + ", but this provider's sandboxes live in " +
                                (cfg.namespace_per_sandbox ? std::string("their own namespaces") : "namespace " + want));
            return Target{ns, pod, std::nullopt, id};
        }
    }
    // A random sandbox's bare pod name.
    if (is_random_pod_name(id)) {
        std::string ns = namespace_for(cfg, id);
        return Target{ns, id, std::nullopt, ns + "/" + id};
    }
    std::string pod = RawProvider::pod_name_for(id);
    return Target{namespace_for(cfg, pod), pod, proto::sanitize_label_value(id), id};
}

// ---- readiness (kubernetes-wire.md §8) -----------------------------------------------------

enum class PodState { ready, waiting, failed };

struct Evaluation {
    PodState state{PodState::waiting};
    Error error{};
    bool dead{false};  // failed for good: being deleted, terminal phase, a container terminated
};

Evaluation evaluate_pod(const json::object& pod) {
    Evaluation ev;
    auto* m = meta(pod);
    std::string name = str_at(m, "name");
    if (m && m->contains("deletionTimestamp")) {
        ev.state = PodState::failed;
        ev.dead = true;
        ev.error = make_error(errc::pod_failed, "pod " + name + " is being deleted");
        return ev;
    }
    const json::object* status = obj_at(pod, "status");
    if (!status) return ev;
    std::string phase = str_at(status, "phase");
    if (phase == "Failed" || phase == "Succeeded") {
        std::string reason = str_at(status, "reason");
        std::string message = str_at(status, "message");
        ev.state = PodState::failed;
        ev.dead = true;
        ev.error = make_error(errc::pod_failed, "pod " + name + " " + phase + (reason.empty() ? "" : ": " + reason) +
                                                    (message.empty() ? "" : ": " + message));
        ev.error.reason = reason;
        return ev;
    }
    for (const char* list : {"initContainerStatuses", "containerStatuses"}) {
        auto it = status->find(list);
        if (it == status->end() || !it->value().is_array()) continue;
        bool init = std::string_view(list) == "initContainerStatuses";
        for (const auto& cs : it->value().get_array()) {
            if (!cs.is_object()) continue;
            const auto& c = cs.get_object();
            const json::object* st = obj_at(c, "state");
            if (!st) continue;
            std::string cname = str_at(&c, "name");
            if (auto* w = obj_at(*st, "waiting")) {
                std::string reason = str_at(w, "reason");
                std::string message = str_at(w, "message");
                errc code{};
                if (reason == "ErrImagePull" || reason == "ImagePullBackOff" || reason == "InvalidImageName" ||
                    reason == "ErrImageNeverPull")
                    code = errc::image_pull_failed;
                else if (reason == "CrashLoopBackOff" || reason == "CreateContainerConfigError" ||
                         reason == "CreateContainerError" || reason == "RunContainerError" ||
                         reason == "PreStartHookError" || reason == "PostStartHookError")
                    code = errc::pod_failed;
                if (code != errc{}) {
                    ev.state = PodState::failed;
                    ev.error = make_error(code, "pod " + name + " container " + cname + ": " + reason +
                                                    (message.empty() ? "" : ": " + message));
                    ev.error.reason = reason;
                    return ev;
                }
            } else if (auto* t = obj_at(*st, "terminated")) {
                std::string reason = str_at(t, "reason");
                std::int64_t code = 0;
                if (auto e = t->find("exitCode"); e != t->end() && e->value().is_int64()) code = e->value().get_int64();
                if (init && code == 0) continue;  // a finished init container is progress
                ev.state = PodState::failed;
                ev.dead = true;
                ev.error = make_error(errc::pod_failed, "pod " + name + " container " + cname + " terminated (exit " +
                                                            std::to_string(code) + (reason.empty() ? "" : ", " + reason) +
                                                            ")" + (str_at(t, "message").empty() ? "" : ": " + str_at(t, "message")));
                ev.error.reason = reason.empty() ? "Terminated" : reason;
                return ev;
            }
        }
    }
    if (auto it = status->find("conditions"); it != status->end() && it->value().is_array()) {
        for (const auto& c : it->value().get_array()) {
            if (!c.is_object()) continue;
            if (str_at(&c.get_object(), "type") == "Ready" && str_at(&c.get_object(), "status") == "True") {
                ev.state = PodState::ready;
                return ev;
            }
        }
    }
    return ev;
}

// Readiness of a sandbox for others than its creator: also its setup_script must be done.
Evaluation evaluate_sandbox(const json::object& pod, bool require_setup) {
    auto ev = evaluate_pod(pod);
    if (ev.state != PodState::ready || !require_setup) return ev;
    std::string setup = annotation_of(pod, raw_keys::setup);
    if (setup == "pending") ev.state = PodState::waiting;
    else if (setup == "failed") {
        ev.state = PodState::failed;
        ev.error = make_error(errc::pod_failed, "setup_script failed in pod " + str_at(meta(pod), "namespace") + "/" +
                                                    str_at(meta(pod), "name") + " (run by its creator)");
    }
    return ev;
}

bool is_ready(const json::object& pod) { return evaluate_sandbox(pod, true).state == PodState::ready; }

std::string status_of(const json::object& pod) {
    auto* m = meta(pod);
    if (m && m->contains("deletionTimestamp")) return "terminated";
    std::string phase = str_at(obj_at(pod, "status"), "phase");
    if (phase == "Succeeded") return "terminated";
    if (phase == "Failed") return "failed";
    auto ev = evaluate_sandbox(pod, true);
    if (ev.state == PodState::failed) return "failed";
    if (label_of(pod, raw_keys::pool_status) == "warm") return "warm";
    if (phase == "Running" && ev.state == PodState::ready) return "running";
    return "pending";
}

asio::awaitable<void> sleep_for(std::chrono::milliseconds d) {
    asio::steady_timer t(co_await asio::this_coro::executor);
    t.expires_after(d);
    co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
}

// ---- racing an operation against a deadline ----------------------------------------------------
// The operation runs detached; when the deadline comes first the caller moves on and the
// operation's late result is dropped. `keep` holds what the operation uses (e.g. the watch
// stream whose next() is running) until it has finished.

template <class T>
struct RaceSlot {
    explicit RaceSlot(const asio::any_io_executor& ex) : signal(ex) {}
    std::optional<T> value{};
    asio::steady_timer signal;
    std::shared_ptr<void> keep{};
};

template <class T>
asio::awaitable<void> race_deliver(std::shared_ptr<RaceSlot<T>> slot, asio::awaitable<T> op) {
    try {
        T v = co_await std::move(op);
        slot->value.emplace(std::move(v));
    } catch (const std::exception&) {
    }
    slot->signal.cancel();
    slot->keep.reset();
}

template <class T>
asio::awaitable<std::optional<T>> until_deadline(asio::awaitable<T> op, steady_clock::time_point deadline,
                                                 std::shared_ptr<void> keep) {
    auto ex = co_await asio::this_coro::executor;
    auto slot = std::make_shared<RaceSlot<T>>(ex);
    slot->keep = std::move(keep);
    slot->signal.expires_at(deadline);
    asio::co_spawn(ex, race_deliver(slot, std::move(op)), asio::detached);
    if (!slot->value) co_await slot->signal.async_wait(asio::as_tuple(asio::use_awaitable));
    std::optional<T> out;
    if (slot->value) out.emplace(std::move(*slot->value));
    co_return out;
}

// Requests that own their arguments (and the client, through st): they may outlive the
// caller's frame when it stops waiting for them.
asio::awaitable<Result<json::object>> get_owned(StatePtr st, ResourcePath path) {
    co_return co_await st->client.get(path);
}
asio::awaitable<Result<WatchStream>> watch_owned(StatePtr st, ResourcePath path, WatchOptions options) {
    co_return co_await st->client.watch(path, options);
}

// Waits until the pod is Ready (and, with require_setup, its creator's setup_script done):
// watch from `rv`, re-GET on 410, poll when watching fails. Every wait on the server is raced
// against the deadline, so a server that ignores timeoutSeconds cannot hold us past it.
asio::awaitable<Result<void>> wait_ready(StatePtr st, std::string ns, std::string name, json::object initial,
                                         steady_clock::time_point deadline, bool require_setup) {
    auto ev = evaluate_sandbox(initial, require_setup);
    if (ev.state == PodState::ready) co_return Result<void>{};
    if (ev.state == PodState::failed) co_return fail(ev.error);
    std::string rv = str_at(meta(initial), "resourceVersion");
    auto timeout_error = [&] {
        return make_error(errc::startup_timeout, "pod " + ns + "/" + name + " not Ready" +
                                                     (require_setup ? std::string(" (with setup done)") : std::string()) +
                                                     " within " + std::to_string(st->config.startup_timeout.count()) +
                                                     " s");
    };
    int watch_failures = 0;
    while (steady_clock::now() < deadline) {
        auto remaining = std::chrono::duration_cast<std::chrono::seconds>(deadline - steady_clock::now()).count() + 1;
        bool need_get = rv.empty() || watch_failures > 0;
        if (need_get) {
            const ResourcePath rp1 = pods_path(ns).with_name(name);  // named: g++ 12 and temporaries in co_await
            auto get_op = get_owned(st, rp1);
            std::shared_ptr<void> no_keep;
            auto got_or = co_await until_deadline(std::move(get_op), deadline, no_keep);
            if (!got_or) break;
            auto& got = *got_or;
            if (!got) {
                if (got.error().is(errc::not_found))
                    co_return fail(errc::pod_failed, "pod " + ns + "/" + name + " was deleted while starting");
                if (steady_clock::now() >= deadline) break;
                co_await sleep_for(std::chrono::milliseconds(500));
                continue;
            }
            auto e2 = evaluate_sandbox(*got, require_setup);
            if (e2.state == PodState::ready) co_return Result<void>{};
            if (e2.state == PodState::failed) co_return fail(e2.error);
            rv = str_at(meta(*got), "resourceVersion");
            if (watch_failures >= 3) {  // watch unusable here: poll
                co_await sleep_for(std::chrono::milliseconds(std::min(2000, 250 * watch_failures)));
                ++watch_failures;
                continue;
            }
        }
        WatchOptions wo;
        wo.field_selector = "metadata.name=" + name;
        wo.resource_version = rv;
        wo.timeout_seconds = static_cast<int>(remaining);
        const ResourcePath rp2 = pods_path(ns);  // named: g++ 12 and temporaries in co_await
        auto watch_op = watch_owned(st, rp2, wo);
        std::shared_ptr<void> no_keep;
        auto stream_or = co_await until_deadline(std::move(watch_op), deadline, no_keep);
        if (!stream_or) break;
        if (!*stream_or) {
            ++watch_failures;
            if (stream_or->error().is(errc::expired) || stream_or->error().is(errc::gone)) rv.clear();
            continue;
        }
        auto stream = std::make_shared<WatchStream>(std::move(**stream_or));
        bool restart = false;
        bool timed_out = false;
        while (!restart) {
            auto next_op = stream->next();
            std::shared_ptr<void> keep = stream;
            auto next_or = co_await until_deadline(std::move(next_op), deadline, keep);
            if (!next_or) {
                timed_out = true;
                break;
            }
            auto& next = *next_or;
            if (!next) {
                if (next.error().is(errc::expired) || next.error().is(errc::gone)) rv.clear();
                else ++watch_failures;
                restart = true;
                break;
            }
            if (!next->has_value()) {  // server ended the watch (timeoutSeconds)
                restart = true;
                break;
            }
            WatchEvent& e = **next;
            switch (e.type) {
                case WatchEvent::Type::added:
                case WatchEvent::Type::modified: {
                    if (str_at(meta(e.object), "name") != name) break;
                    rv = str_at(meta(e.object), "resourceVersion");
                    auto e3 = evaluate_sandbox(e.object, require_setup);
                    if (e3.state == PodState::ready) co_return Result<void>{};
                    if (e3.state == PodState::failed) co_return fail(e3.error);
                    break;
                }
                case WatchEvent::Type::deleted:
                    if (str_at(meta(e.object), "name") != name) break;
                    co_return fail(errc::pod_failed, "pod " + ns + "/" + name + " was deleted while starting");
                case WatchEvent::Type::bookmark:
                    if (auto r = str_at(meta(e.object), "resourceVersion"); !r.empty()) rv = r;
                    break;
                case WatchEvent::Type::error:
                    rv.clear();  // 410 or other: fresh GET
                    restart = true;
                    break;
            }
            if (steady_clock::now() >= deadline) break;
        }
        stream->close();  // also ends a next() still running after the deadline
        if (timed_out) break;
        if (rv.empty()) watch_failures = std::max(watch_failures, 1);
        if (steady_clock::now() >= deadline) break;
    }
    // One last look, bounded too: it may have become ready right at the deadline.
    const ResourcePath rp3 = pods_path(ns).with_name(name);  // named: g++ 12 and temporaries in co_await
    auto last_op = get_owned(st, rp3);
    std::shared_ptr<void> no_keep;
    auto last_or = co_await until_deadline(std::move(last_op), steady_clock::now() + std::chrono::seconds(5), no_keep);
    if (last_or && *last_or) {
        auto e4 = evaluate_sandbox(**last_or, require_setup);
        if (e4.state == PodState::ready) co_return Result<void>{};
        if (e4.state == PodState::failed) co_return fail(e4.error);
    }
    co_return fail(timeout_error());
}

// ---- manifests ------------------------------------------------------------------------------

json::object resource_map(const std::string& cpu, const std::string& mem, const std::string& eph) {
    json::object o;
    if (!cpu.empty()) o["cpu"] = cpu;
    if (!mem.empty()) o["memory"] = mem;
    if (!eph.empty()) o["ephemeral-storage"] = eph;
    return o;
}

json::object seccomp(const std::string& profile) {
    json::object o;
    if (profile.rfind("localhost/", 0) == 0 || profile.rfind("Localhost/", 0) == 0) {
        o["type"] = "Localhost";
        o["localhostProfile"] = profile.substr(10);
    } else {
        o["type"] = profile;
    }
    return o;
}

json::object build_pod(const RawProviderConfig& cfg, const std::string& name, json::object labels,
                       json::object annotations) {
    json::object container;
    container["name"] = "sandbox";
    container["image"] = cfg.image;
    if (!cfg.image_pull_policy.empty()) container["imagePullPolicy"] = cfg.image_pull_policy;
    json::array command;
    for (const auto& c : cfg.command) command.emplace_back(c);
    if (!command.empty()) container["command"] = std::move(command);
    container["workingDir"] = cfg.workdir;
    if (!cfg.env.empty()) {
        json::array env;
        for (const auto& [k, v] : cfg.env) {
            json::object e;
            e["name"] = k;
            e["value"] = v;
            env.push_back(std::move(e));
        }
        container["env"] = std::move(env);
    }
    json::object resources;
    auto req = resource_map(cfg.cpu_request, cfg.memory_request, cfg.ephemeral_storage_request);
    auto lim = resource_map(cfg.cpu_limit, cfg.memory_limit, cfg.ephemeral_storage_limit);
    if (!req.empty()) resources["requests"] = std::move(req);
    if (!lim.empty()) resources["limits"] = std::move(lim);
    container["resources"] = std::move(resources);
    json::object csc;
    csc["allowPrivilegeEscalation"] = false;
    csc["privileged"] = false;
    csc["runAsNonRoot"] = true;
    csc["runAsUser"] = cfg.run_as_user;
    csc["runAsGroup"] = cfg.run_as_group;
    json::object caps;
    caps["drop"] = json::array{"ALL"};
    csc["capabilities"] = std::move(caps);
    if (!cfg.seccomp_profile.empty()) csc["seccompProfile"] = seccomp(cfg.seccomp_profile);
    if (cfg.read_only_root_filesystem) csc["readOnlyRootFilesystem"] = true;
    container["securityContext"] = std::move(csc);

    // The workdir is always a writable emptyDir (an image rarely has it, and a runtime-created
    // one is root-owned); /tmp too with a read-only root. User mounts at those paths win.
    json::array mounts = cfg.volume_mounts;
    json::array volumes = cfg.volumes;
    auto mounted = [&](const std::string& path) {
        for (const auto& m : mounts)
            if (m.is_object() && str_at(&m.get_object(), "mountPath") == path) return true;
        return false;
    };
    auto add_empty_dir = [&](const std::string& vname, const std::string& path) {
        if (mounted(path)) return;
        json::object v;
        v["name"] = vname;
        v["emptyDir"] = json::object{};
        volumes.push_back(std::move(v));
        json::object m;
        m["name"] = vname;
        m["mountPath"] = path;
        mounts.push_back(std::move(m));
    };
    add_empty_dir("ksb-workdir", cfg.workdir);
    if (cfg.read_only_root_filesystem) add_empty_dir("ksb-tmp", "/tmp");
    container["volumeMounts"] = std::move(mounts);

    json::object spec;
    spec["restartPolicy"] = "Never";
    spec["automountServiceAccountToken"] = false;
    spec["enableServiceLinks"] = false;
    spec["terminationGracePeriodSeconds"] = 5;
    json::object psc;
    psc["runAsNonRoot"] = true;
    psc["runAsUser"] = cfg.run_as_user;
    psc["runAsGroup"] = cfg.run_as_group;
    psc["fsGroup"] = cfg.run_as_group;
    if (!cfg.seccomp_profile.empty()) psc["seccompProfile"] = seccomp(cfg.seccomp_profile);
    spec["securityContext"] = std::move(psc);
    if (!cfg.service_account.empty()) spec["serviceAccountName"] = cfg.service_account;
    if (!cfg.runtime_class_name.empty()) spec["runtimeClassName"] = cfg.runtime_class_name;
    if (cfg.active_deadline_seconds) spec["activeDeadlineSeconds"] = *cfg.active_deadline_seconds;
    if (!cfg.node_selector.empty()) spec["nodeSelector"] = string_map(cfg.node_selector);
    if (!cfg.tolerations.empty()) spec["tolerations"] = cfg.tolerations;
    if (!cfg.image_pull_secrets.empty()) {
        json::array secrets;
        for (const auto& s : cfg.image_pull_secrets) {
            json::object o;
            o["name"] = s;
            secrets.push_back(std::move(o));
        }
        spec["imagePullSecrets"] = std::move(secrets);
    }
    if (!cfg.init_containers.empty()) spec["initContainers"] = cfg.init_containers;
    spec["volumes"] = std::move(volumes);
    spec["containers"] = json::array{std::move(container)};
    json::value merged = spec;
    if (!cfg.pod_template_overrides.empty()) merged = proto::apply_merge_patch(merged, cfg.pod_template_overrides);

    json::object metadata;
    metadata["name"] = name;
    metadata["labels"] = std::move(labels);
    metadata["annotations"] = std::move(annotations);
    json::object pod;
    pod["apiVersion"] = "v1";
    pod["kind"] = "Pod";
    pod["metadata"] = std::move(metadata);
    pod["spec"] = merged.is_object() ? merged.get_object() : json::object{};
    return pod;
}

json::object base_labels(const std::string& sandbox_label) {
    json::object l;
    l[raw_keys::managed_by] = raw_keys::managed_by_value;
    l[raw_keys::sandbox_id] = sandbox_label;
    return l;
}

json::object owner_reference(const std::string& pod, const std::string& uid) {
    json::object ref;
    ref["apiVersion"] = "v1";
    ref["kind"] = "Pod";
    ref["name"] = pod;
    ref["uid"] = uid;
    return ref;
}

// The deny-all policy; `owner_uid` (when known) makes it the pod's dependent, so it goes with
// the pod even when the pod is deleted behind our back.
json::object build_network_policy(const RawProviderConfig& cfg, const std::string& name,
                                  const std::string& sandbox_label, const std::string& token,
                                  const std::string& owner_uid) {
    json::object selector;
    json::object match;
    match[raw_keys::sandbox_id] = sandbox_label;
    selector["matchLabels"] = std::move(match);
    json::object spec;
    spec["podSelector"] = std::move(selector);
    spec["policyTypes"] = json::array{"Ingress", "Egress"};
    spec["ingress"] = json::array{};
    spec["egress"] = json::array{};
    json::object metadata;
    metadata["name"] = np_name(name);
    json::object labels = base_labels(sandbox_label);
    labels[raw_keys::namespace_mode] = mode_value(cfg);
    metadata["labels"] = std::move(labels);
    json::object ann;
    ann[raw_keys::created_at] = now_iso();  // orphan sweeps spare policies of creations in flight
    ann[raw_keys::creation_token] = token;
    metadata["annotations"] = std::move(ann);
    if (!owner_uid.empty()) metadata["ownerReferences"] = json::array{owner_reference(name, owner_uid)};
    json::object np;
    np["apiVersion"] = "networking.k8s.io/v1";
    np["kind"] = "NetworkPolicy";
    np["metadata"] = std::move(metadata);
    np["spec"] = std::move(spec);
    return np;
}

json::object named(const char* api_version, const char* kind, const std::string& name, json::object labels) {
    json::object metadata;
    metadata["name"] = name;
    metadata["labels"] = std::move(labels);
    json::object o;
    o["apiVersion"] = api_version;
    o["kind"] = kind;
    o["metadata"] = std::move(metadata);
    return o;
}

// Labels and annotations for a sandbox: computed once, used for creation or a warm claim.
struct Identity {
    std::string id;          // caller id, or the pod name
    std::string label;       // sanitised id
    json::object labels;     // full pod labels (without pool-status)
    json::object annotations;
};

Result<Identity> make_identity(const RawProviderConfig& cfg, const std::string& id,
                               const std::map<std::string, std::string>& user_labels,
                               std::optional<std::int64_t> ttl, std::optional<std::int64_t> ttl_idle) {
    Identity idt;
    idt.id = id;
    idt.label = proto::sanitize_label_value(id);
    json::object labels;
    for (const auto& [k, v] : cfg.extra_labels) labels[k] = v;
    json::object originals;
    std::map<std::string, std::string> all = cfg.default_labels;
    for (const auto& [k, v] : user_labels) all[k] = v;
    for (const auto& [k, v] : all) {
        if (k == "managed-by" || k == "sandbox-id" || k == "pool-status" || k == "namespace-mode" || k == "config-hash")
            return fail(errc::invalid_argument, "label key \"" + k + "\" is reserved by kubesandbox");
        std::string key = std::string(raw_keys::prefix) + k;
        if (!proto::validate_qualified_name(key).empty())
            return fail(errc::invalid_argument, "invalid label key \"" + k + "\": " + proto::validate_qualified_name(key)[0]);
        std::string value = proto::sanitize_label_value(v);
        if (value != v) originals[k] = v;
        labels[key] = value;
    }
    labels[raw_keys::managed_by] = raw_keys::managed_by_value;
    labels[raw_keys::sandbox_id] = idt.label;
    json::object ann;
    for (const auto& [k, v] : cfg.extra_annotations) ann[k] = v;
    ann[raw_keys::created_at] = now_iso();
    if (!ttl) ttl = cfg.default_ttl_seconds;
    if (!ttl_idle) ttl_idle = cfg.default_ttl_idle_seconds;
    if (ttl) ann[raw_keys::ttl_seconds] = std::to_string(*ttl);
    if (ttl_idle) ann[raw_keys::ttl_idle_seconds] = std::to_string(*ttl_idle);
    if (idt.label != id) ann[raw_keys::id_original] = id;
    if (!originals.empty()) ann[raw_keys::labels_original] = json::serialize(originals);
    idt.labels = std::move(labels);
    idt.annotations = std::move(ann);
    return idt;
}

std::unique_ptr<KubernetesSandbox> make_sandbox(const StatePtr& st, const std::string& ns, const std::string& pod,
                                                const std::string& id) {
    KubernetesSandboxOptions o;
    o.workdir = st->config.workdir;
    o.max_output_bytes = st->config.max_output_bytes;
    o.default_timeout = st->config.default_exec_timeout;
    std::weak_ptr<RawProvider::State> weak = st;
    o.on_activity = [weak, id] {
        if (auto s = weak.lock()) {
            record_activity_impl(s, id);
        }
    };
    // A copy shares the provider's connection pool and rate limiter.
    return std::make_unique<KubernetesSandbox>(st->client, ns, pod, std::move(o));
}

asio::awaitable<Result<void>> patch_annotations(StatePtr st, std::string ns, std::string pod, json::object ann) {
    json::object metadata;
    metadata["annotations"] = std::move(ann);
    json::object body;
    body["metadata"] = std::move(metadata);
    json::value v = std::move(body);
    const ResourcePath rp4 = pods_path(ns).with_name(pod);  // named: g++ 12 and temporaries in co_await
    auto r = co_await st->client.patch(rp4, std::move(v), PatchType::merge);
    if (!r) co_return fail(r.error());
    co_return Result<void>{};
}

asio::awaitable<Result<void>> patch_activity(StatePtr st, std::string ns, std::string pod) {
    json::object ann;
    ann[raw_keys::last_activity] = now_iso();
    co_return co_await patch_annotations(std::move(st), std::move(ns), std::move(pod), std::move(ann));
}

// What makes warm pods interchangeable: the whole pod spec (image, resources, security
// context, overrides...), the namespace mode, network blocking and the setup script.
std::string compute_config_hash(const RawProviderConfig& cfg) {
    json::object pod = build_pod(cfg, "ksb-x", json::object{}, json::object{});
    std::string material = json::serialize(pod["spec"]);
    material += "|namespace-mode=";
    material += mode_value(cfg);
    material += "|block-network=";
    material += cfg.block_network ? "1" : "0";
    material += "|setup=" + cfg.setup_script;
    return sha256_hex(material, 16);
}

// A failure after which the request may or may not have been applied: the answer was lost.
bool outcome_unknown(const Error& e) {
    return e.is(errc::timeout) || e.is(errc::connection_closed) || e.is(errc::invalid_response) ||
           e.is(errc::internal_error) || e.is(errc::service_unavailable) || e.is(errc::server_timeout) ||
           e.is(errc::unknown_status);
}

// After a create failed with `e`: the object when it exists anyway (a 409, or a lost answer
// to a request that went through), else the error to report.
asio::awaitable<Result<json::object>> existing_after(StatePtr st, ResourcePath path, Error e) {
    if (!e.is(errc::already_exists) && !outcome_unknown(e)) co_return fail(std::move(e));
    auto got = co_await st->client.get(path);
    if (got) co_return std::move(*got);
    if (got.error().is(errc::not_found)) co_return fail(std::move(e));
    co_return fail(got.error());
}

// The age of an object from our created-at annotation, else its creationTimestamp.
std::optional<std::chrono::seconds> age_of(const json::object& o, system_clock::time_point now) {
    auto created = parse_time(annotation_of(o, raw_keys::created_at));
    if (!created) created = parse_time(str_at(meta(o), "creationTimestamp"));
    if (!created) return std::nullopt;
    return std::chrono::duration_cast<std::chrono::seconds>(now - *created);
}

// A setup_script still "pending" long after its creator could still be running it (Ready
// within startup_timeout, the script bounded by it too): the creator died mid-setup.
bool setup_abandoned(const json::object& pod, const RawProviderConfig& cfg, system_clock::time_point now) {
    if (annotation_of(pod, raw_keys::setup) != "pending") return false;
    auto age = age_of(pod, now);
    return age && *age > 2 * cfg.startup_timeout + std::chrono::seconds(60);
}

bool being_deleted(const json::object& o) {
    auto* m = meta(o);
    if (m && m->contains("deletionTimestamp")) return true;
    return str_at(obj_at(o, "status"), "phase") == "Terminating";
}

// Removes pod, NetworkPolicy and the per-sandbox namespace. found = any of them existed.
// Only our own objects: the pod must be labelled ours (and carry `expected_label` when given);
// a namespace goes only when it is the pod's per-sandbox namespace (named after the pod,
// labelled ours with the same sandbox id). The policy goes only once the pod is gone.
asio::awaitable<Result<bool>> delete_objects(StatePtr st, std::string ns, std::string pod,
                                             std::optional<std::string> expected_label, bool remove_namespace) {
    bool found = false;
    std::optional<Error> first_error;
    std::optional<std::string> label = expected_label;
    const ResourcePath rp5 = pods_path(ns).with_name(pod);  // named: g++ 12 and temporaries in co_await
    auto cur = co_await st->client.get(rp5);
    bool pod_gone = false;
    if (cur) {
        if (label_of(*cur, raw_keys::managed_by) != raw_keys::managed_by_value)
            co_return fail(errc::conflict, "pod " + ns + "/" + pod + " is not managed by kubesandbox: not deleting it");
        std::string have = label_of(*cur, raw_keys::sandbox_id);
        if (label && have != *label)
            co_return fail(errc::conflict, "pod " + ns + "/" + pod + " belongs to another sandbox (" + have + "): not deleting it");
        label = have;
        DeleteOptions pod_opts;
        pod_opts.grace_period_seconds = st->config.delete_grace_period.count();
        pod_opts.precondition_uid = str_at(meta(*cur), "uid");
        auto r1 = co_await st->client.remove(rp5, pod_opts);
        if (r1) {
            found = found || r1->found;
            pod_gone = true;
        } else if (r1.error().is(errc::not_found)) {
            pod_gone = true;
        } else {
            first_error = r1.error();
        }
    } else if (cur.error().is(errc::not_found)) {
        pod_gone = true;
    } else {
        first_error = cur.error();
    }
    if (!pod_gone) co_return fail(*first_error);  // never unprotect a pod that may still run

    const ResourcePath rp6 = np_path(ns).with_name(np_name(pod));  // named: g++ 12 and temporaries in co_await
    auto r2 = co_await st->client.remove(rp6);
    if (r2) found = found || r2->found;
    else if (!r2.error().is(errc::not_found) && !first_error) first_error = r2.error();

    if (remove_namespace && ns == pod && pod.rfind("ksb-", 0) == 0) {
        const ResourcePath rp7 = ns_path().with_name(ns);  // named: g++ 12 and temporaries in co_await
        auto nso = co_await st->client.get(rp7);
        if (nso) {
            std::string nl = label_of(*nso, raw_keys::sandbox_id);
            bool ours = label_of(*nso, raw_keys::managed_by) == raw_keys::managed_by_value && !nl.empty() &&
                        (!label || nl == *label);
            if (ours && !being_deleted(*nso)) {
                DeleteOptions ns_opts;
                ns_opts.precondition_uid = str_at(meta(*nso), "uid");
                auto r3 = co_await st->client.remove(rp7, ns_opts);
                if (r3) found = found || r3->found;
                else if (!r3.error().is(errc::not_found) && !first_error) first_error = r3.error();
            }
        } else if (!nso.error().is(errc::not_found) && !first_error) {
            first_error = nso.error();
        }
    }
    if (first_error) co_return fail(*first_error);
    co_return found;
}

// Polls until the pod with `uid` is gone (or replaced), bounded by `deadline`.
asio::awaitable<Result<void>> wait_gone(StatePtr st, std::string ns, std::string pod, std::string uid,
                                        steady_clock::time_point deadline) {
    const ResourcePath rp = pods_path(ns).with_name(pod);  // named: g++ 12 and temporaries in co_await
    for (;;) {
        auto got = co_await st->client.get(rp);
        if (!got && got.error().is(errc::not_found)) co_return Result<void>{};
        if (got && str_at(meta(*got), "uid") != uid) co_return Result<void>{};
        if (steady_clock::now() >= deadline)
            co_return fail(errc::startup_timeout, "pod " + ns + "/" + pod + " still terminating after " +
                                                      std::to_string(st->config.startup_timeout.count()) + " s");
        co_await sleep_for(std::chrono::milliseconds(200));
    }
}

// Removes what one create_and_wait call made (and only that).
asio::awaitable<void> remove_created(StatePtr st, std::string ns, std::string name, bool pod, bool np, bool nspace) {
    if (pod) {
        DeleteOptions o;
        o.grace_period_seconds = st->config.delete_grace_period.count();
        const ResourcePath rp = pods_path(ns).with_name(name);  // named: g++ 12 and temporaries in co_await
        auto r = co_await st->client.remove(rp, o);
        if (!r && !r.error().is(errc::not_found))
            std::cerr << "kubesandbox: cleanup of pod " << ns << "/" << name << " failed: " << r.error().describe() << "\n";
    }
    if (pod || np) {
        const ResourcePath rp = np_path(ns).with_name(np_name(name));  // named: g++ 12 and temporaries in co_await
        auto r = co_await st->client.remove(rp);
        if (!r && !r.error().is(errc::not_found))
            std::cerr << "kubesandbox: cleanup of NetworkPolicy " << ns << "/" << np_name(name)
                      << " failed: " << r.error().describe() << "\n";
    }
    if (nspace) {
        const ResourcePath rp = ns_path().with_name(ns);  // named: g++ 12 and temporaries in co_await
        auto r = co_await st->client.remove(rp);
        if (!r && !r.error().is(errc::not_found))
            std::cerr << "kubesandbox: cleanup of namespace " << ns << " failed: " << r.error().describe() << "\n";
    }
}

// Creates namespace (per-sandbox), NetworkPolicy (before the pod: no unisolated window) and
// the pod, then waits for Ready and runs the setup script. On failure everything this call
// created is deleted. Every object carries a creation token unique to this call, so a 409
// caused by our own retried request is told apart from someone else's object: `adopted` is
// set only for a pod someone else created (then we wait for its setup instead of running it).
struct CreateOutcome {
    bool adopted{false};
};

asio::awaitable<Result<CreateOutcome>> create_and_wait(StatePtr st, std::string name, Identity idt,
                                                       bool deterministic, bool warm) {
    const auto& cfg = st->config;
    auto deadline = steady_clock::now() + cfg.startup_timeout;
    std::string ns = namespace_for(cfg, name);
    const std::string token = random_token();
    CreateOptions copts;
    copts.idempotent = deterministic;
    copts.field_manager = "kubesandbox";
    bool created_ns = false;
    bool created_np = false;

    if (cfg.namespace_per_sandbox) {
        json::object nsl = base_labels(idt.label);
        nsl[raw_keys::namespace_mode] = "per-sandbox";
        json::object nso = named("v1", "Namespace", ns, std::move(nsl));
        json::object nsa;
        nsa[raw_keys::created_at] = now_iso();
        nsa[raw_keys::creation_token] = token;
        nso["metadata"].as_object()["annotations"] = std::move(nsa);
        const ResourcePath rp8 = ns_path();  // named: g++ 12 and temporaries in co_await
        auto r = co_await st->client.create(rp8, std::move(nso), copts);
        json::object existing;
        if (r) existing = std::move(*r);
        else {
            const ResourcePath rp8b = ns_path().with_name(ns);  // named: g++ 12 and temporaries in co_await
            auto got = co_await existing_after(st, rp8b, r.error());
            if (!got) co_return fail(got.error());
            existing = std::move(*got);
        }
        created_ns = annotation_of(existing, raw_keys::creation_token) == token;
        if (!created_ns) {
            if (label_of(existing, raw_keys::managed_by) != raw_keys::managed_by_value ||
                label_of(existing, raw_keys::sandbox_id) != idt.label)
                co_return fail(errc::already_exists, "namespace " + ns + " exists and is not this sandbox's");
            if (being_deleted(existing))
                co_return fail(errc::conflict, "namespace " + ns + " is being deleted; try again when it is gone");
        }
        json::object quota = named("v1", "ResourceQuota", "ksb-quota", base_labels(idt.label));
        json::object hard;
        hard["pods"] = "1";
        if (!cfg.cpu_request.empty()) hard["requests.cpu"] = cfg.cpu_request;
        if (!cfg.cpu_limit.empty()) hard["limits.cpu"] = cfg.cpu_limit;
        if (!cfg.memory_request.empty()) hard["requests.memory"] = cfg.memory_request;
        if (!cfg.memory_limit.empty()) hard["limits.memory"] = cfg.memory_limit;
        if (!cfg.ephemeral_storage_request.empty()) hard["requests.ephemeral-storage"] = cfg.ephemeral_storage_request;
        if (!cfg.ephemeral_storage_limit.empty()) hard["limits.ephemeral-storage"] = cfg.ephemeral_storage_limit;
        json::object qspec;
        qspec["hard"] = std::move(hard);
        quota["spec"] = std::move(qspec);
        const ResourcePath rp9 = core_path("resourcequotas", ns);  // named: g++ 12 and temporaries in co_await
        auto rq = co_await st->client.create(rp9, std::move(quota), copts);
        json::object limit;
        limit["type"] = "Container";
        auto dl = resource_map(cfg.cpu_limit, cfg.memory_limit, cfg.ephemeral_storage_limit);
        auto dr = resource_map(cfg.cpu_request, cfg.memory_request, cfg.ephemeral_storage_request);
        if (!dl.empty()) limit["default"] = std::move(dl);
        if (!dr.empty()) limit["defaultRequest"] = std::move(dr);
        json::object lspec;
        lspec["limits"] = json::array{std::move(limit)};
        json::object lr = named("v1", "LimitRange", "ksb-limits", base_labels(idt.label));
        lr["spec"] = std::move(lspec);
        const ResourcePath rp10 = core_path("limitranges", ns);  // named: g++ 12 and temporaries in co_await
        auto rl = co_await st->client.create(rp10, std::move(lr), copts);
        const Result<json::object>* bad = nullptr;
        if (!rq && !rq.error().is(errc::already_exists)) bad = &rq;
        else if (!rl && !rl.error().is(errc::already_exists)) bad = &rl;
        if (bad) {
            Error e = bad->error();
            co_await remove_created(st, ns, name, false, false, created_ns);
            co_return fail(e);
        }
    }

    if (cfg.block_network) {
        json::object np = build_network_policy(cfg, name, idt.label, token, std::string());
        const ResourcePath rp11 = np_path(ns);  // named: g++ 12 and temporaries in co_await
        auto r = co_await st->client.create(rp11, std::move(np), copts);
        if (!r) {
            const ResourcePath rp11b = np_path(ns).with_name(np_name(name));  // named: g++ 12 and temporaries in co_await
            r = co_await existing_after(st, rp11b, r.error());
        }
        if (r) created_np = annotation_of(*r, raw_keys::creation_token) == token;
        if (!r) {
            Error e = r.error();
            e.message = "NetworkPolicy (block_network) could not be created, sandbox not started: " + e.message;
            // Another creator's pod may rely on a policy we did not make: touch only our own.
            co_await remove_created(st, ns, name, false, false, created_ns);
            co_return fail(e);
        }
    }

    json::object labels = idt.labels;
    labels[raw_keys::pool_status] = warm ? "warm" : "active";
    labels[raw_keys::namespace_mode] = mode_value(cfg);
    labels[raw_keys::config_hash] = st->config_hash;
    json::object annotations = idt.annotations;
    annotations[raw_keys::creation_token] = token;
    if (!cfg.setup_script.empty()) annotations[raw_keys::setup] = "pending";
    json::object pod = build_pod(cfg, name, std::move(labels), std::move(annotations));
    const ResourcePath rp13 = pods_path(ns);  // named: g++ 12 and temporaries in co_await
    auto created = co_await st->client.create(rp13, std::move(pod), copts);
    CreateOutcome outcome;
    json::object initial;
    if (!created && (deterministic || !created.error().is(errc::already_exists))) {
        // A 409 for a fixed name, or a lost answer: look at what is there.
        const ResourcePath rp14 = pods_path(ns).with_name(name);  // named: g++ 12 and temporaries in co_await
        created = co_await existing_after(st, rp14, created.error());
    }
    if (created) {
        initial = std::move(*created);
    } else {
        Error e = created.error();
        // A random name is nobody else's: remove the pod too in case the create went through.
        co_await remove_created(st, ns, name, !deterministic, created_np, created_ns);
        co_return fail(e);
    }
    // A 409 after our own lost-response attempt is still our pod: the token says so.
    const bool ours = annotation_of(initial, raw_keys::creation_token) == token;
    if (!ours) {
        if (label_of(initial, raw_keys::managed_by) != raw_keys::managed_by_value ||
            label_of(initial, raw_keys::sandbox_id) != idt.label) {
            co_await remove_created(st, ns, name, false, created_np, created_ns);
            co_return fail(errc::already_exists, "pod " + ns + "/" + name + " exists and is not this sandbox's (" +
                                                     (label_of(initial, raw_keys::managed_by).empty()
                                                          ? std::string("not managed by kubesandbox")
                                                          : "sandbox id " + label_of(initial, raw_keys::sandbox_id)) +
                                                     ")");
        }
        outcome.adopted = true;
    }
    const std::string uid = str_at(meta(initial), "uid");

    if (ours && cfg.block_network) {
        // Make the policy the pod's dependent: it goes with the pod, however the pod goes.
        json::object md;
        md["ownerReferences"] = json::array{owner_reference(name, uid)};
        json::object body;
        body["metadata"] = std::move(md);
        json::value v = std::move(body);
        const ResourcePath rp12 = np_path(ns).with_name(np_name(name));  // named: g++ 12 and temporaries in co_await
        auto r = co_await st->client.patch(rp12, std::move(v), PatchType::merge);
        if (!r && !r.error().is(errc::not_found))  // not found: re-created below after Ready
            std::cerr << "kubesandbox: ownerReference on " << ns << "/" << np_name(name)
                      << " not set: " << r.error().describe() << "\n";
    }

    auto ready = co_await wait_ready(st, ns, name, std::move(initial), deadline, outcome.adopted);
    if (!ready) {
        Error e = ready.error();
        if (ours) co_await remove_created(st, ns, name, true, true, created_ns);
        co_return fail(e);
    }
    if (outcome.adopted) co_return outcome;

    if (cfg.block_network) {
        // Fail-closed even if a racing creator removed the policy after its own failure.
        const ResourcePath rp15 = np_path(ns).with_name(np_name(name));  // named: g++ 12 and temporaries in co_await
        auto np = co_await st->client.get(rp15);
        if (!np) {
            json::object again = build_network_policy(cfg, name, idt.label, token, uid);
            const ResourcePath rp16 = np_path(ns);  // named: g++ 12 and temporaries in co_await
            auto r = co_await st->client.create(rp16, std::move(again), copts);
            if (!r && !r.error().is(errc::already_exists)) {
                Error e = r.error();
                co_await remove_created(st, ns, name, true, true, created_ns);
                co_return fail(e);
            }
        }
    }
    if (!cfg.setup_script.empty()) {
        auto sb = make_sandbox(st, ns, name, idt.id);
        auto out = co_await sb->execute(cfg.setup_script, cfg.startup_timeout);
        if (!out || out->exit_code != 0) {
            std::string why;
            if (!out) why = out.error().describe();
            else {
                why = "exit code ";
                why += out->exit_code ? std::to_string(*out->exit_code) : std::string("unknown");
                why += ", output: " + out->output;
            }
            json::object ann;
            ann[raw_keys::setup] = "failed";  // adopters waiting for it stop now
            co_await patch_annotations(st, ns, name, std::move(ann));
            co_await remove_created(st, ns, name, true, true, created_ns);
            co_return fail(errc::pod_failed, "setup_script failed in " + ns + "/" + name + ": " + why);
        }
        json::object ann;
        ann[raw_keys::setup] = "done";
        auto p = co_await patch_annotations(st, ns, name, std::move(ann));
        if (!p) {
            Error e = p.error();
            co_await remove_created(st, ns, name, true, true, created_ns);
            co_return fail(e);
        }
    }
    co_return outcome;
}

std::string warm_selector(const StatePtr& st) {
    std::map<std::string, std::string> sel{{raw_keys::pool_status, "warm"}, {raw_keys::config_hash, st->config_hash}};
    return scope_selector(st->config, sel);
}

ResourcePath list_path(const RawProviderConfig& cfg) {
    return pods_path(cfg.namespace_per_sandbox ? std::string() : cfg.namespace_name);
}

// Counts warm pods of this config that are alive (not terminal, not being deleted).
asio::awaitable<Result<int>> count_warm(StatePtr st) {
    ListOptions lo;
    lo.label_selector = warm_selector(st);
    lo.limit = 100;
    ResourcePath path = list_path(st->config);
    int n = 0;
    for (;;) {
        auto page = co_await st->client.list(path, lo);
        if (!page) co_return fail(page.error());
        for (const auto& item : page->items) {
            if (!item.is_object()) continue;
            // Starting ones count too, or concurrent refills overshoot.
            if (evaluate_sandbox(item.get_object(), true).state != PodState::failed) ++n;
        }
        if (page->continue_token.empty()) break;
        lo.continue_token = page->continue_token;
    }
    co_return n;
}

asio::awaitable<Result<int>> fill_pool(StatePtr st) {
    int target = st->config.warm_pool_size;
    if (target <= 0) co_return 0;
    auto have = co_await count_warm(st);
    if (!have) co_return fail(have.error());
    int created = 0;
    std::optional<Error> err;
    for (int i = *have; i < target; ++i) {
        std::string name = random_name();
        std::map<std::string, std::string> none;
        auto idt = make_identity(st->config, name, none, std::nullopt, std::nullopt);
        if (!idt) co_return fail(idt.error());
        auto r = co_await create_and_wait(st, name, std::move(*idt), false, true);
        if (r) ++created;
        else if (!err) err = r.error();
    }
    if (created == 0 && err) co_return fail(*err);
    co_return created;
}

void spawn_refill(const StatePtr& st) {
    if (st->config.warm_pool_size <= 0) return;
    {
        std::lock_guard lock(st->mutex);
        if (st->refilling) {
            st->refill_again = true;  // a claim after the running refill counted: count again
            return;
        }
        st->refilling = true;
    }
    auto task = [](StatePtr s) -> asio::awaitable<void> {
        for (;;) {
            try {
                auto r = co_await fill_pool(s);
                if (!r) std::cerr << "kubesandbox: warm pool refill failed: " << r.error().describe() << "\n";
            } catch (const std::exception& e) {
                std::cerr << "kubesandbox: warm pool refill failed: " << e.what() << "\n";
            }
            std::lock_guard lock(s->mutex);
            if (!s->refill_again) {
                s->refilling = false;
                break;
            }
            s->refill_again = false;
        }
    };
    asio::co_spawn(st->client.get_executor(), task(st), asio::detached);
}

// Claims a Ready warm pod of this config with a resourceVersion precondition. nullopt when
// none was free. The claim carries a token unique to this call: when the PATCH went through
// but its response was lost, the retry's 409 (or the dead connection) is resolved by reading
// the pod back, instead of being taken for someone else's claim and orphaning the pod.
asio::awaitable<Result<std::optional<std::pair<std::string, std::string>>>> claim_warm(
    StatePtr st, std::map<std::string, std::string> user_labels, std::optional<std::int64_t> ttl,
    std::optional<std::int64_t> ttl_idle) {
    using Claimed = std::optional<std::pair<std::string, std::string>>;
    ListOptions lo;
    lo.label_selector = warm_selector(st);
    lo.limit = 100;
    ResourcePath path = list_path(st->config);
    auto page = co_await st->client.list(path, lo);
    if (!page) co_return fail(page.error());
    for (const auto& item : page->items) {
        if (!item.is_object()) continue;
        const auto& pod = item.get_object();
        if (!is_ready(pod) || status_of(pod) != "warm") continue;
        std::string name = str_at(meta(pod), "name");
        std::string ns = str_at(meta(pod), "namespace");  // per-sandbox mode: the pod's own namespace
        std::string rv = str_at(meta(pod), "resourceVersion");
        auto idt = make_identity(st->config, name, user_labels, ttl, ttl_idle);
        if (!idt) co_return fail(idt.error());
        const std::string token = random_token();
        json::object labels = idt->labels;
        labels[raw_keys::pool_status] = "active";
        json::object annotations = idt->annotations;
        annotations[raw_keys::last_activity] = now_iso();
        annotations[raw_keys::claim_token] = token;
        json::object metadata;
        metadata["resourceVersion"] = rv;
        metadata["labels"] = std::move(labels);
        metadata["annotations"] = std::move(annotations);
        json::object body;
        body["metadata"] = std::move(metadata);
        json::value v = std::move(body);
        const ResourcePath rp17 = pods_path(ns).with_name(name);  // named: g++ 12 and temporaries in co_await
        auto r = co_await st->client.patch(rp17, std::move(v), PatchType::merge);
        if (r) {
            // The precondition guarantees we were the only claimer of that version.
            if (label_of(*r, raw_keys::pool_status) == "active" && annotation_of(*r, raw_keys::claim_token) == token)
                co_return Claimed(std::make_pair(ns, name));
            continue;
        }
        if (r.error().is(errc::not_found)) continue;
        auto now_pod = co_await st->client.get(rp17);
        if (now_pod && label_of(*now_pod, raw_keys::pool_status) == "active" &&
            annotation_of(*now_pod, raw_keys::claim_token) == token)
            co_return Claimed(std::make_pair(ns, name));  // our own claim, its response lost
        if (r.error().is(errc::conflict)) continue;       // someone else got it: take the next
        co_return fail(r.error());
    }
    co_return Claimed();
}

SandboxInfo info_of(const json::object& pod) {
    SandboxInfo info;
    auto* m = meta(pod);
    info.pod_name = str_at(m, "name");
    info.namespace_name = str_at(m, "namespace");
    std::string original = annotation_of(pod, raw_keys::id_original);
    std::string label = label_of(pod, raw_keys::sandbox_id);
    if (!original.empty()) info.id = original;
    else if (!label.empty() && label != info.pod_name) info.id = label;  // a caller id
    else info.id = info.pod_name;  // a random sandbox: its pod name (accepted as an id like id())
    info.status = status_of(pod);
    info.created_at = annotation_of(pod, raw_keys::created_at);
    if (info.created_at.empty()) info.created_at = str_at(m, "creationTimestamp");
    info.last_activity = annotation_of(pod, raw_keys::last_activity);
    json::object originals;
    if (auto o = annotation_of(pod, raw_keys::labels_original); !o.empty()) {
        boost::system::error_code ec;
        auto v = json::parse(o, ec);
        if (!ec && v.is_object()) originals = v.get_object();
    }
    if (auto* l = m ? obj_at(*m, "labels") : nullptr) {
        std::string_view prefix = raw_keys::prefix;
        for (const auto& [k, v] : *l) {
            std::string_view key = k;
            if (key.substr(0, prefix.size()) != prefix || !v.is_string()) continue;
            std::string user(key.substr(prefix.size()));
            if (user == "managed-by" || user == "sandbox-id" || user == "pool-status" || user == "namespace-mode" ||
                user == "config-hash")
                continue;
            auto orig = originals.find(user);
            if (orig != originals.end() && orig->value().is_string()) info.labels[user] = std::string(orig->value().get_string());
            else info.labels[user] = std::string(v.get_string());
        }
    }
    return info;
}

std::string selector_for(const RawProviderConfig& cfg, const std::map<std::string, std::string>& user_labels) {
    std::map<std::string, std::string> sel;
    for (const auto& [k, v] : user_labels) sel[std::string(raw_keys::prefix) + k] = proto::sanitize_label_value(v);
    return scope_selector(cfg, sel);
}

// Lists every page of `path` (limit 100 per page).
asio::awaitable<Result<std::vector<json::object>>> list_all(StatePtr st, ResourcePath path, std::string selector) {
    std::vector<json::object> out;
    ListOptions lo;
    lo.label_selector = std::move(selector);
    lo.limit = 100;
    for (;;) {
        auto page = co_await st->client.list(path, lo);
        if (!page) co_return fail(page.error());
        for (auto& item : page->items)
            if (item.is_object()) out.push_back(std::move(item.get_object()));
        if (page->continue_token.empty()) break;
        lo.continue_token = page->continue_token;
    }
    co_return out;
}

}  // namespace

static void record_activity_impl(const StatePtr& st, const std::string& id) {
    auto now = steady_clock::now();
    {
        std::lock_guard lock(st->mutex);
        auto it = st->last_patch.find(id);
        if (it != st->last_patch.end() && now - it->second < st->config.activity_debounce) return;
        st->last_patch[id] = now;
        if (st->last_patch.size() > 10000) {  // forget old entries; a repeat patch is harmless
            for (auto i = st->last_patch.begin(); i != st->last_patch.end();) {
                if (now - i->second >= st->config.activity_debounce) i = st->last_patch.erase(i);
                else ++i;
            }
        }
    }
    auto target = resolve_id(st->config, id);
    if (!target) return;
    auto task = [](StatePtr s, std::string n, std::string p) -> asio::awaitable<void> {
        try {
            auto r = co_await patch_activity(s, n, p);
            if (!r && !r.error().is(errc::not_found))
                std::cerr << "kubesandbox: last-activity patch failed: " << r.error().describe() << "\n";
        } catch (const std::exception&) {
        }
    };
    asio::co_spawn(st->client.get_executor(), task(st, target->ns, target->pod), asio::detached);
}

RawProvider::RawProvider(KubeClient client, RawProviderConfig config)
    : state_(std::make_shared<State>(std::move(client), std::move(config))) {
    state_->config_hash = compute_config_hash(state_->config);
}
RawProvider::~RawProvider() = default;

const RawProviderConfig& RawProvider::config() const { return state_->config; }

std::string RawProvider::pod_name_for(const std::string& id) {
    if (is_random_pod_name(id)) return id;  // a random sandbox's own name
    std::string s;
    for (char c : id) {
        unsigned char u = static_cast<unsigned char>(c);
        char l = static_cast<char>(std::tolower(u));
        if (std::isalnum(u) && u < 128) s.push_back(l);
        else if (!s.empty() && s.back() != '-') s.push_back('-');
    }
    while (!s.empty() && s.back() == '-') s.pop_back();
    // Kept verbatim only when nothing changed and it cannot pass for a hashed name (-<10 hex>)
    // or a random one: then "ksb-" + id is unique to the id, and hashed names are too.
    bool changed = s != id || s.size() > 47 || looks_hashed(s) || is_random_tail(s);
    if (s.size() > 47) s.resize(47);
    while (!s.empty() && s.back() == '-') s.pop_back();
    std::string name = "ksb-" + s;
    if (changed || s.empty()) name += (s.empty() ? "" : "-") + sha256_hex(id, 10);
    return name;
}

asio::awaitable<Result<std::unique_ptr<KubernetesSandbox>>> RawProvider::get_or_create(GetOrCreateOptions options) {
    using R = Result<std::unique_ptr<KubernetesSandbox>>;
    StatePtr st = state_;
    const auto& cfg = st->config;
    if (options.sandbox_id && options.sandbox_id->empty())
        co_return fail(errc::invalid_argument, "sandbox_id must not be empty");

    if (options.sandbox_id) {
        auto target = resolve_id(cfg, *options.sandbox_id);
        if (!target) co_return fail(target.error());
        const std::string& id = target->id;
        const std::string& name = target->pod;
        const std::string& ns = target->ns;
        const ResourcePath rp18 = pods_path(ns).with_name(name);  // named: g++ 12 and temporaries in co_await
        auto got = co_await st->client.get(rp18);
        if (got) {
            if (label_of(*got, raw_keys::managed_by) != raw_keys::managed_by_value)
                co_return fail(errc::already_exists, "pod " + ns + "/" + name + " exists and is not managed by kubesandbox");
            if (target->label && label_of(*got, raw_keys::sandbox_id) != *target->label)
                co_return fail(errc::already_exists, "pod " + ns + "/" + name + " belongs to another sandbox (" +
                                                         label_of(*got, raw_keys::sandbox_id) + ")");
            auto ev = evaluate_pod(*got);
            const bool abandoned = setup_abandoned(*got, cfg, system_clock::now());
            if (ev.dead || abandoned) {
                // A dead or terminating pod would block its id forever: replace it.
                if (!options.create_if_missing)
                    co_return fail(errc::not_found, "sandbox " + id + " is gone: " +
                                                        (abandoned ? std::string("its setup was abandoned") : ev.error.message));
                auto deadline = steady_clock::now() + cfg.startup_timeout;
                std::string uid = str_at(meta(*got), "uid");
                if (!being_deleted(*got)) {
                    DeleteOptions dopts;
                    dopts.grace_period_seconds = 0;  // it is dead: nothing to shut down gracefully
                    dopts.precondition_uid = uid;
                    auto d = co_await st->client.remove(rp18, dopts);
                    if (!d && !d.error().is(errc::not_found) && !d.error().is(errc::conflict)) co_return fail(d.error());
                }
                auto gone = co_await wait_gone(st, ns, name, uid, deadline);
                if (!gone) co_return fail(gone.error());
                got = fail(errc::not_found, "replaced");
            } else {
                if (ev.state == PodState::failed) co_return fail(ev.error);
                auto w = co_await wait_ready(st, ns, name, std::move(*got), steady_clock::now() + cfg.startup_timeout, true);
                if (!w) co_return fail(w.error());
                {
                    std::lock_guard lock(st->mutex);
                    st->last_patch[id] = steady_clock::now();
                }
                auto p = co_await patch_activity(st, ns, name);
                if (!p && !p.error().is(errc::not_found)) co_return fail(p.error());
                co_return R(make_sandbox(st, ns, name, id));
            }
        }
        if (!got.error().is(errc::not_found)) co_return fail(got.error());
        if (!options.create_if_missing) co_return fail(errc::not_found, "sandbox " + id + " (pod " + ns + "/" + name + ") not found");
        // A pod reference names the pod itself; a caller id is recorded as the sandbox id.
        std::string identity_id = target->label ? *options.sandbox_id : name;
        auto idt = make_identity(cfg, identity_id, options.labels, options.ttl_seconds, options.ttl_idle_seconds);
        if (!idt) co_return fail(idt.error());
        auto r = co_await create_and_wait(st, name, std::move(*idt), true, false);
        if (!r) co_return fail(r.error());
        co_return R(make_sandbox(st, ns, name, id));
    }

    if (!options.create_if_missing) co_return fail(errc::invalid_argument, "create_if_missing=false needs a sandbox_id");
    if (cfg.warm_pool_size > 0) {
        auto claimed = co_await claim_warm(st, options.labels, options.ttl_seconds, options.ttl_idle_seconds);
        spawn_refill(st);
        if (claimed && *claimed) {
            auto [ns, name] = **claimed;
            co_return R(make_sandbox(st, ns, name, ns + "/" + name));
        }
        if (!claimed) std::cerr << "kubesandbox: warm pool claim failed, creating: " << claimed.error().describe() << "\n";
    }
    std::string name = random_name();
    std::string ns = namespace_for(cfg, name);
    auto idt = make_identity(cfg, name, options.labels, options.ttl_seconds, options.ttl_idle_seconds);
    if (!idt) co_return fail(idt.error());
    auto r = co_await create_and_wait(st, name, std::move(*idt), false, false);
    if (!r) co_return fail(r.error());
    co_return R(make_sandbox(st, ns, name, ns + "/" + name));
}

asio::awaitable<Result<SandboxPage>> RawProvider::list(ListSandboxesOptions options) {
    StatePtr st = state_;
    ListOptions lo;
    lo.label_selector = selector_for(st->config, options.labels);
    lo.limit = options.limit ? *options.limit : 100;  // always paged, so a cursor is always honoured
    lo.continue_token = options.cursor;
    const ResourcePath rp19 = list_path(st->config);  // named: g++ 12 and temporaries in co_await
    auto page = co_await st->client.list(rp19, lo);
    if (!page) co_return fail(page.error());
    SandboxPage out;
    out.next_cursor = page->continue_token;
    for (const auto& item : page->items) {
        if (!item.is_object()) continue;
        auto info = info_of(item.get_object());
        if (options.status && info.status != *options.status) continue;
        if (!options.status && !options.include_warm && info.status == "warm") continue;
        out.items.push_back(std::move(info));
    }
    co_return out;
}

asio::awaitable<Result<bool>> RawProvider::delete_sandbox(std::string id) {
    StatePtr st = state_;
    auto target = resolve_id(st->config, id);
    if (!target) co_return fail(target.error());
    {
        std::lock_guard lock(st->mutex);
        st->last_patch.erase(id);
        st->last_patch.erase(target->id);
    }
    co_return co_await delete_objects(st, target->ns, target->pod, target->label, true);
}

void RawProvider::record_activity(const std::string& id) { record_activity_impl(state_, id); }

asio::awaitable<Result<CleanupResult>> RawProvider::cleanup(std::optional<std::chrono::seconds> max_idle) {
    StatePtr st = state_;
    const auto& cfg = st->config;
    // Collect every page first (deleting while paging would not change the snapshot anyway).
    const ResourcePath rp20 = list_path(cfg);  // named: g++ 12 and temporaries in co_await
    auto listed = co_await list_all(st, rp20, selector_for(cfg, {}));
    if (!listed) co_return fail(listed.error());
    CleanupResult result;
    auto now = system_clock::now();
    for (const auto& pod : *listed) {
        auto info = info_of(pod);
        auto ev = evaluate_pod(pod);
        if (being_deleted(pod)) {  // already going
            ++result.kept;
            continue;
        }
        auto age = age_of(pod, now);
        // Dead pods (terminal phase, a terminated container; failed warm pods too) never
        // recover under restartPolicy Never; a pod stuck failing to start (image pull...)
        // is reaped once its creator has certainly given up.
        bool expire = ev.dead || setup_abandoned(pod, cfg, now);
        if (!expire && ev.state == PodState::failed && age && *age > cfg.startup_timeout + std::chrono::seconds(30))
            expire = true;
        auto created = parse_time(annotation_of(pod, raw_keys::created_at));
        if (!created) created = parse_time(str_at(meta(pod), "creationTimestamp"));
        if (!expire) {
            if (auto ttl = parse_int(annotation_of(pod, raw_keys::ttl_seconds)); ttl && created)
                expire = now - *created > std::chrono::seconds(*ttl);
        }
        if (!expire) {
            std::optional<std::chrono::seconds> idle;
            bool warm = label_of(pod, raw_keys::pool_status) == "warm";
            if (max_idle && !warm) idle = *max_idle;  // warm pods are idle by design
            else if (auto t = parse_int(annotation_of(pod, raw_keys::ttl_idle_seconds))) idle = std::chrono::seconds(*t);
            if (idle) {
                auto ref = parse_time(annotation_of(pod, raw_keys::last_activity));
                if (!ref) ref = created;
                if (ref) expire = now - *ref > *idle;
            }
        }
        if (!expire) {
            ++result.kept;
            continue;
        }
        std::optional<std::string> label = label_of(pod, raw_keys::sandbox_id);
        auto d = co_await delete_objects(st, info.namespace_name, info.pod_name, label, true);
        if (d) result.deleted.push_back(info.id);
        else result.errors.push_back(CleanupError{info.id, d.error()});
    }

    // Leftovers whose pod is gone (a crash between creating the policy and the pod, a pod
    // deleted behind our back before its policy had an owner): policies, then namespaces.
    // Young ones may belong to a creation in flight and are spared.
    const auto grace = cfg.startup_timeout + std::chrono::seconds(60);
    const ResourcePath rp21 = np_path(cfg.namespace_per_sandbox ? std::string() : cfg.namespace_name);
    auto policies = co_await list_all(st, rp21, selector_for(cfg, {}));
    if (!policies) co_return fail(policies.error());
    static constexpr std::string_view suffix = "-deny-all";
    for (const auto& np : *policies) {
        std::string name = str_at(meta(np), "name");
        std::string ns = str_at(meta(np), "namespace");
        if (name.size() <= suffix.size() || std::string_view(name).substr(name.size() - suffix.size()) != suffix) continue;
        auto age = age_of(np, now);
        if (!age || *age < grace || being_deleted(np)) continue;
        std::string pod = name.substr(0, name.size() - suffix.size());
        const ResourcePath rp22 = pods_path(ns).with_name(pod);  // named: g++ 12 and temporaries in co_await
        auto alive = co_await st->client.get(rp22);
        if (alive || !alive.error().is(errc::not_found)) continue;
        DeleteOptions o;
        o.precondition_uid = str_at(meta(np), "uid");
        const ResourcePath rp23 = np_path(ns).with_name(name);  // named: g++ 12 and temporaries in co_await
        auto d = co_await st->client.remove(rp23, o);
        std::string what = "networkpolicy " + ns + "/" + name;
        if (d) {
            if (d->found) result.orphans_deleted.push_back(what);
        } else if (!d.error().is(errc::not_found)) {
            result.errors.push_back(CleanupError{what, d.error()});
        }
    }
    if (cfg.namespace_per_sandbox) {
        std::map<std::string, std::string> sel{{raw_keys::managed_by, raw_keys::managed_by_value},
                                               {raw_keys::namespace_mode, "per-sandbox"}};
        const ResourcePath rp24 = ns_path();  // named: g++ 12 and temporaries in co_await
        auto spaces = co_await list_all(st, rp24, proto::format_label_selector(sel));
        if (!spaces) co_return fail(spaces.error());
        for (const auto& nso : *spaces) {
            std::string name = str_at(meta(nso), "name");
            auto age = age_of(nso, now);
            if (name.rfind("ksb-", 0) != 0 || label_of(nso, raw_keys::sandbox_id).empty()) continue;
            if (!age || *age < grace || being_deleted(nso)) continue;
            ListOptions lo;
            lo.limit = 1;
            const ResourcePath rp25 = pods_path(name);  // named: g++ 12 and temporaries in co_await
            auto in_it = co_await st->client.list(rp25, lo);
            if (!in_it || !in_it->items.empty()) continue;
            DeleteOptions o;
            o.precondition_uid = str_at(meta(nso), "uid");
            const ResourcePath rp26 = ns_path().with_name(name);  // named: g++ 12 and temporaries in co_await
            auto d = co_await st->client.remove(rp26, o);
            std::string what = "namespace " + name;
            if (d) {
                if (d->found) result.orphans_deleted.push_back(what);
            } else if (!d.error().is(errc::not_found)) {
                result.errors.push_back(CleanupError{what, d.error()});
            }
        }
    }
    co_return result;
}

asio::awaitable<Result<int>> RawProvider::ensure_warm_pool() {
    StatePtr st = state_;
    co_return co_await fill_pool(st);
}

asio::awaitable<Result<PoolStatus>> RawProvider::pool_status() {
    StatePtr st = state_;
    PoolStatus ps;
    ps.target = st->config.warm_pool_size;
    const ResourcePath rp27 = list_path(st->config);  // named: g++ 12 and temporaries in co_await
    auto pods = co_await list_all(st, rp27, selector_for(st->config, {}));
    if (!pods) co_return fail(pods.error());
    for (const auto& pod : *pods) {
        ++ps.total;
        std::string pool = label_of(pod, raw_keys::pool_status);
        if (pool == "warm") {
            if (label_of(pod, raw_keys::config_hash) == st->config_hash && is_ready(pod) && status_of(pod) == "warm")
                ++ps.available;
        } else {
            ++ps.active;
        }
    }
    co_return ps;
}

asio::awaitable<Result<ProviderStats>> RawProvider::stats() {
    StatePtr st = state_;
    ProviderStats s;
    auto now = system_clock::now();
    const ResourcePath rp28 = list_path(st->config);  // named: g++ 12 and temporaries in co_await
    auto pods = co_await list_all(st, rp28, selector_for(st->config, {}));
    if (!pods) co_return fail(pods.error());
    for (const auto& pod : *pods) {
        ++s.total;
        auto status = status_of(pod);
        if (status == "running") {
            ++s.running;
            std::chrono::seconds idle{300};
            if (auto t = parse_int(annotation_of(pod, raw_keys::ttl_idle_seconds))) idle = std::chrono::seconds(*t);
            auto ref = parse_time(annotation_of(pod, raw_keys::last_activity));
            if (!ref) ref = parse_time(annotation_of(pod, raw_keys::created_at));
            if (ref && now - *ref > idle) ++s.idle;
        } else if (status == "pending") ++s.pending;
        else if (status == "warm") ++s.warm;
        else ++s.failed;
    }
    co_return s;
}

}  // namespace kubesandbox
