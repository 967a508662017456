#include "net/tls_session_cache.hpp"

#include <openssl/ssl.h>

#include <algorithm>
#include <cstdint>
#include <ctime>
#include <deque>
#include <map>
#include <memory>
#include <mutex>

namespace kubesandbox::net {

namespace {

struct SessionFree {
    void operator()(SSL_SESSION* s) const noexcept { SSL_SESSION_free(s); }
};
using SessionPtr = std::unique_ptr<SSL_SESSION, SessionFree>;

struct Cache {
    std::mutex mutex;
    std::size_t per_key = 8;
    std::size_t max_keys = 256;
    std::map<std::string, std::deque<SessionPtr>, std::less<>> sessions;
    std::map<std::string, std::uint64_t, std::less<>> used;  // key -> tick of its last store or offer
    std::uint64_t tick = 0;

    // A client reaching many servers (one per sandbox address) must not keep tickets for every
    // one of them: past max_keys the least recently used key goes.
    void touch(const std::string& key) {
        used[key] = ++tick;
        while (sessions.size() > max_keys) {
            auto oldest = std::min_element(used.begin(), used.end(),
                                           [](const auto& a, const auto& b) { return a.second < b.second; });
            sessions.erase(oldest->first);
            used.erase(oldest);
        }
    }
    void forget(std::map<std::string, std::deque<SessionPtr>, std::less<>>::iterator it) {
        used.erase(it->first);
        sessions.erase(it);
    }
};

void free_cache(void*, void* ptr, CRYPTO_EX_DATA*, int, long, void*) { delete static_cast<Cache*>(ptr); }
void free_key(void*, void* ptr, CRYPTO_EX_DATA*, int, long, void*) { delete static_cast<std::string*>(ptr); }

int cache_index() {
    static const int index = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, free_cache);
    return index;
}

int key_index() {
    static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, free_key);
    return index;
}

Cache* cache_of(SSL_CTX* ctx) { return ctx ? static_cast<Cache*>(SSL_CTX_get_ex_data(ctx, cache_index())) : nullptr; }

// OpenSSL hands each new session here (after the handshake for TLS 1.3, while reading). A copy is
// kept: OpenSSL marks the connection's own session not resumable when the connection is closed
// without a TLS shutdown, as our connections are, although a ticket received whole stays valid.
int on_new_session(SSL* ssl, SSL_SESSION* session) {
    Cache* cache = cache_of(SSL_get_SSL_CTX(ssl));
    auto* key = static_cast<std::string*>(SSL_get_ex_data(ssl, key_index()));
    if (!cache || !key || !SSL_SESSION_is_resumable(session)) return 0;
    SessionPtr copy(SSL_SESSION_dup(session));
    if (!copy) return 0;
    std::lock_guard lock(cache->mutex);
    auto& kept = cache->sessions[*key];
    kept.push_back(std::move(copy));
    while (kept.size() > cache->per_key) kept.pop_front();
    cache->touch(*key);
    return 0;  // the passed reference stays OpenSSL's
}

}  // namespace

void enable_session_cache(SSL_CTX* ctx, std::size_t per_key, std::size_t max_keys) {
    if (!ctx) return;
    Cache* cache = cache_of(ctx);
    if (!cache) {
        cache = new Cache;
        SSL_CTX_set_ex_data(ctx, cache_index(), cache);
    }
    {
        std::lock_guard lock(cache->mutex);
        cache->per_key = per_key == 0 ? 1 : per_key;
        cache->max_keys = max_keys == 0 ? 1 : max_keys;
    }
    // Client mode: OpenSSL keeps no internal cache for clients; it only calls on_new_session.
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    SSL_CTX_sess_set_new_cb(ctx, on_new_session);
}

void resume_session(SSL* ssl, const std::string& key) {
    Cache* cache = cache_of(SSL_get_SSL_CTX(ssl));
    if (!cache) return;
    auto* tag = new std::string(key);
    if (!SSL_set_ex_data(ssl, key_index(), tag)) {
        delete tag;
        return;
    }
    SessionPtr offer;
    {
        std::lock_guard lock(cache->mutex);
        auto it = cache->sessions.find(key);
        if (it == cache->sessions.end()) return;
        // Newest first, expired ones dropped on the way. A TLS 1.3 ticket is offered once (the
        // server sends fresh ones on every connection); a TLS 1.2 session stays and a copy is
        // offered, since OpenSSL reports no renewed session after a TLS 1.2 resumption.
        const auto now = static_cast<long>(time(nullptr));
        while (!it->second.empty() && !offer) {
            SSL_SESSION* newest = it->second.back().get();
            if (SSL_SESSION_get_time(newest) + SSL_SESSION_get_timeout(newest) <= now) {
                it->second.pop_back();
            } else if (SSL_SESSION_get_protocol_version(newest) < TLS1_3_VERSION) {
                offer.reset(SSL_SESSION_dup(newest));
                if (!offer) it->second.pop_back();
            } else {
                offer = std::move(it->second.back());
                it->second.pop_back();
            }
        }
        if (it->second.empty()) cache->forget(it);
        else cache->touch(key);
    }
    if (offer) SSL_set_session(ssl, offer.get());  // takes its own reference
}

std::size_t cached_sessions(SSL_CTX* ctx, const std::string& key) {
    Cache* cache = cache_of(ctx);
    if (!cache) return 0;
    std::lock_guard lock(cache->mutex);
    auto it = cache->sessions.find(key);
    return it == cache->sessions.end() ? 0 : it->second.size();
}

std::size_t cached_keys(SSL_CTX* ctx) {
    Cache* cache = cache_of(ctx);
    if (!cache) return 0;
    std::lock_guard lock(cache->mutex);
    return cache->sessions.size();
}

}  // namespace kubesandbox::net
