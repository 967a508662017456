// ListWatch: list, then watch from the list's resourceVersion, re-listing on 410 (client-go's
// reflector), yielding the differences after a re-list.
#include <kubesandbox/kube_client.hpp>

#include <deque>
#include <map>

namespace kubesandbox {

namespace asio = boost::asio;
namespace json = boost::json;

// ---------------------------------------------------------------------------------------------
// ListWatch

namespace {

std::string object_key(const json::object& o) {
    const json::value* md = o.if_contains("metadata");
    if (!md || !md->is_object()) return {};
    std::string key;
    if (auto* ns = md->get_object().if_contains("namespace"); ns && ns->is_string())
        key = std::string(ns->get_string());
    key += '/';
    if (auto* n = md->get_object().if_contains("name"); n && n->is_string()) key += std::string(n->get_string());
    return key;
}

std::string object_rv(const json::object& o) {
    if (auto* md = o.if_contains("metadata"); md && md->is_object())
        if (auto* rv = md->get_object().if_contains("resourceVersion"); rv && rv->is_string())
            return std::string(rv->get_string());
    return {};
}

bool is_too_old(const Error& e) { return e.is(errc::expired) || e.is(errc::gone); }

void push_event(std::deque<WatchEvent>& out, WatchEvent::Type type, const json::object& object) {
    WatchEvent ev;
    ev.type = type;
    ev.object = object;
    out.push_back(std::move(ev));
}

// After a (re-)list: the events that turn what the caller knew into what the list says.
void diff_list(std::map<std::string, json::object>& known, std::map<std::string, json::object> listed,
               std::deque<WatchEvent>& out) {
    for (const auto& [key, obj] : listed) {
        auto it = known.find(key);
        if (it == known.end()) push_event(out, WatchEvent::Type::added, obj);
        else if (object_rv(it->second) != object_rv(obj)) push_event(out, WatchEvent::Type::modified, obj);
    }
    for (const auto& [key, obj] : known)
        if (!listed.contains(key)) push_event(out, WatchEvent::Type::deleted, obj);
    known = std::move(listed);
}

}  // namespace

struct ListWatch::State {
    State(KubeClient c, ResourcePath p, WatchOptions o)
        : client(std::move(c)), collection(std::move(p)), options(std::move(o)) {}
    KubeClient client;
    ResourcePath collection;
    WatchOptions options;
    std::map<std::string, json::object> known;  // what the caller has been told exists
    std::deque<WatchEvent> pending;
    std::optional<WatchStream> stream;
    std::string resource_version;
    bool need_list = true;
    int lists = 0;
    int expired_in_a_row = 0;  // 410 right after a fresh list: give up instead of spinning
};

ListWatch::ListWatch(KubeClient client, ResourcePath collection, WatchOptions options)
    : state_(std::make_unique<State>(std::move(client), std::move(collection), std::move(options))) {}
ListWatch::ListWatch(ListWatch&&) noexcept = default;
ListWatch& ListWatch::operator=(ListWatch&&) noexcept = default;
ListWatch::~ListWatch() { close(); }

void ListWatch::close() {
    if (state_ && state_->stream) state_->stream->close();
}

int ListWatch::lists_made() const noexcept { return state_ ? state_->lists : 0; }

asio::awaitable<Result<WatchEvent>> ListWatch::next() {
    if (!state_) co_return fail(errc::invalid_argument, "list-watch is not open");
    auto& s = *state_;
    for (;;) {
        if (!s.pending.empty()) {
            WatchEvent ev = std::move(s.pending.front());
            s.pending.pop_front();
            co_return std::move(ev);
        }
        if (s.need_list) {
            ListOptions lo;
            lo.label_selector = s.options.label_selector;
            lo.field_selector = s.options.field_selector;
            lo.limit = 500;
            std::map<std::string, json::object> listed;
            std::string rv;
            for (;;) {
                auto page = co_await s.client.list(s.collection, lo);
                if (!page) co_return fail(page.error());
                for (auto& item : page->items) {
                    if (!item.is_object()) continue;
                    std::string key = object_key(item.get_object());
                    listed[key] = std::move(item.get_object());
                }
                rv = page->resource_version;
                if (page->continue_token.empty()) break;
                lo.continue_token = page->continue_token;
            }
            ++s.lists;
            diff_list(s.known, std::move(listed), s.pending);
            s.resource_version = rv;
            s.need_list = false;
            continue;
        }
        if (!s.stream) {
            WatchOptions wo = s.options;
            wo.resource_version = s.resource_version;
            auto w = co_await s.client.watch(s.collection, wo);
            if (!w) {
                if (is_too_old(w.error())) {
                    s.need_list = true;  // now, or on the caller's next call after giving up
                    if (++s.expired_in_a_row <= 2) continue;
                    s.expired_in_a_row = 0;
                }
                co_return fail(w.error());
            }
            s.stream.emplace(std::move(*w));
        }
        auto ev = co_await s.stream->next();
        if (!ev) {
            s.stream.reset();
            if (is_too_old(ev.error())) {
                s.need_list = true;
                if (++s.expired_in_a_row <= 2) continue;
                s.expired_in_a_row = 0;
            }
            co_return fail(ev.error());
        }
        if (!*ev) {  // normal end (timeoutSeconds): resume from the last resourceVersion seen
            s.stream.reset();
            continue;
        }
        s.expired_in_a_row = 0;
        WatchEvent& e = **ev;
        if (auto rv = object_rv(e.object); !rv.empty()) s.resource_version = rv;
        if (e.type == WatchEvent::Type::bookmark) continue;
        const std::string key = object_key(e.object);
        if (e.type == WatchEvent::Type::deleted) s.known.erase(key);
        else s.known[key] = e.object;
        co_return std::move(e);
    }
}

}  // namespace kubesandbox
