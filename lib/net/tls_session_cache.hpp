// TLS session resumption for client contexts. A context with a cache keeps the session tickets
// servers send (TLS 1.3 NewSessionTicket, TLS 1.2 tickets) per server key, and the next
// connection to that key offers one instead of a full handshake: no certificate chain to send,
// sign and verify. TLS 1.3 tickets are used once (RFC 8446 §C.4), newest first, a few per key;
// a TLS 1.2 session is reused until it expires (OpenSSL reports no renewal after resuming one).
// The key names everything the session was verified for (address, SNI, verified name), so a
// session is only ever offered where a full handshake would have been accepted.
#pragma once

#include <cstddef>
#include <string>

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;

namespace kubesandbox::net {

// Turns the cache on for a client context (idempotent); at most `per_key` tickets kept per key
// and tickets for at most `max_keys` keys (the least recently used key goes first).
void enable_session_cache(SSL_CTX* ctx, std::size_t per_key = 8, std::size_t max_keys = 256);

// Before the handshake: tags `ssl` with `key` (the tickets it receives are kept under it) and
// offers the newest kept ticket for that key, if any. No-op when the context has no cache.
void resume_session(SSL* ssl, const std::string& key);

// Tickets kept for `key` now (tests, stats).
std::size_t cached_sessions(SSL_CTX* ctx, const std::string& key);

// Keys with tickets kept now (tests, stats).
std::size_t cached_keys(SSL_CTX* ctx);

}  // namespace kubesandbox::net
