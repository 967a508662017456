// Waiting for a sandbox pod: Ready by one watch from a known resourceVersion (re-GET on 410,
// polling when watching fails), and gone after a delete. Every wait on the server is raced
// against the deadline, so a server that ignores timeoutSeconds cannot hold us past it.
#include "providers/raw/naming.hpp"
#include "providers/raw/pod_state.hpp"
#include "providers/raw/state.hpp"
#include "util/json_access.hpp"
#include "util/until_deadline.hpp"

namespace kubesandbox::raw {

namespace asio = boost::asio;
namespace json = boost::json;
using std::chrono::steady_clock;
using util::metadata_of;
using util::string_at;

namespace {

// Requests that own their arguments (and the client, through st): they may outlive the
// caller's frame when it stops waiting for them.
asio::awaitable<Result<json::object>> get_owned(StatePtr st, ResourcePath path) {
    co_return co_await st->client.get(std::move(path));
}
asio::awaitable<Result<WatchStream>> watch_owned(StatePtr st, ResourcePath path, WatchOptions options) {
    co_return co_await st->client.watch(std::move(path), std::move(options));
}

std::string resource_version_of(const json::object& o) { return string_at(metadata_of(o), "resourceVersion"); }

}  // namespace

asio::awaitable<Result<void>> wait_ready(StatePtr st, std::string ns, std::string name, json::object initial,
                                         steady_time deadline, bool require_setup) {
    auto ev = evaluate_sandbox(initial, require_setup);
    if (ev.state == PodState::ready) co_return Result<void>{};
    if (ev.state == PodState::failed) co_return fail(ev.error);
    std::string rv = resource_version_of(initial);
    auto deleted_error = [&] {
        return make_error(errc::pod_failed, "pod " + ns + "/" + name + " was deleted while starting");
    };
    int watch_failures = 0;
    while (steady_clock::now() < deadline) {
        auto remaining = std::chrono::duration_cast<std::chrono::seconds>(deadline - steady_clock::now()).count() + 1;
        if (rv.empty() || watch_failures > 0) {
            auto got_or =
                co_await util::until_deadline(get_owned(st, pods_path(ns).with_name(name)), deadline, nullptr);
            if (!got_or) break;
            auto& got = *got_or;
            if (!got) {
                if (got.error().is(errc::not_found)) co_return fail(deleted_error());
                if (steady_clock::now() >= deadline) break;
                co_await util::sleep_for(std::chrono::milliseconds(500));
                continue;
            }
            auto e2 = evaluate_sandbox(*got, require_setup);
            if (e2.state == PodState::ready) co_return Result<void>{};
            if (e2.state == PodState::failed) co_return fail(e2.error);
            rv = resource_version_of(*got);
            if (watch_failures >= 3) {  // watch unusable here: poll
                co_await util::sleep_for(std::chrono::milliseconds(std::min(2000, 250 * watch_failures)));
                ++watch_failures;
                continue;
            }
        }
        WatchOptions wo;
        wo.field_selector = "metadata.name=" + name;
        wo.resource_version = rv;
        wo.timeout_seconds = static_cast<int>(remaining);
        auto stream_or =
            co_await util::until_deadline(watch_owned(st, pods_path(ns), std::move(wo)), deadline, nullptr);
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
            auto next_or = co_await util::until_deadline(stream->next(), deadline, stream);
            if (!next_or) {
                timed_out = true;
                break;
            }
            auto& next = *next_or;
            if (!next) {
                if (next.error().is(errc::expired) || next.error().is(errc::gone)) rv.clear();
                else ++watch_failures;
                break;
            }
            if (!next->has_value()) break;  // the server ended the watch (timeoutSeconds)
            WatchEvent& e = **next;
            switch (e.type) {
                case WatchEvent::Type::added:
                case WatchEvent::Type::modified: {
                    if (string_at(metadata_of(e.object), "name") != name) break;
                    rv = resource_version_of(e.object);
                    auto e3 = evaluate_sandbox(e.object, require_setup);
                    if (e3.state == PodState::ready) co_return Result<void>{};
                    if (e3.state == PodState::failed) co_return fail(e3.error);
                    break;
                }
                case WatchEvent::Type::deleted:
                    if (string_at(metadata_of(e.object), "name") != name) break;
                    co_return fail(deleted_error());
                case WatchEvent::Type::bookmark:
                    if (auto r = resource_version_of(e.object); !r.empty()) rv = r;
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
    auto last_or = co_await util::until_deadline(get_owned(st, pods_path(ns).with_name(name)),
                                                 steady_clock::now() + std::chrono::seconds(5), nullptr);
    if (last_or && *last_or) {
        auto e4 = evaluate_sandbox(**last_or, require_setup);
        if (e4.state == PodState::ready) co_return Result<void>{};
        if (e4.state == PodState::failed) co_return fail(e4.error);
    }
    co_return fail(errc::startup_timeout, "pod " + ns + "/" + name + " not Ready" +
                                              (require_setup ? std::string(" (with setup done)") : std::string()) +
                                              " within " + std::to_string(st->options.startup_timeout.count()) + " s");
}

asio::awaitable<Result<void>> wait_gone(StatePtr st, std::string ns, std::string pod, std::string uid,
                                        steady_time deadline) {
    for (;;) {
        auto got = co_await st->client.get(pods_path(ns).with_name(pod));
        if (!got && got.error().is(errc::not_found)) co_return Result<void>{};
        if (got && string_at(metadata_of(*got), "uid") != uid) co_return Result<void>{};
        if (steady_clock::now() >= deadline)
            co_return fail(errc::startup_timeout, "pod " + ns + "/" + pod + " still terminating after " +
                                                      std::to_string(st->options.startup_timeout.count()) + " s");
        co_await util::sleep_for(std::chrono::milliseconds(200));
    }
}

}  // namespace kubesandbox::raw
