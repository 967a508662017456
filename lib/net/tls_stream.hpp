// TLS over a connected TCP socket, with OpenSSL reading and writing the socket itself through a
// small BIO over its descriptor and waiting for readiness through the reactor. Asio's
// ssl::stream instead stages every byte through a memory BIO pair and two buffers of its own:
// about 70 KiB per connection allocated up front and two extra copies of each byte. Here a
// connection holds the SSL object alone while it waits (SSL_MODE_RELEASE_BUFFERS gives the
// record buffers back whenever they are empty, and a write batch's buffer past 4 KiB goes back
// once sent). Writes seal up to four records and send them at once; reads take every record
// already received.
#pragma once

#include "net/any_stream.hpp"

#include <memory>
#include <string>

typedef struct ssl_ctx_st SSL_CTX;

namespace kubesandbox::net {

struct TlsClientIdentity {
    std::string sni_host;     // empty: no SNI (IP addresses never go in SNI)
    std::string verify_host;  // empty: no name check; an IP address checks the IP SANs
    std::string session_key;  // empty: no resumption (net/tls_session_cache.hpp)
};

std::unique_ptr<AnyStream::Impl> make_tls_client(boost::asio::ip::tcp::socket socket, SSL_CTX* ctx,
                                                 const TlsClientIdentity& identity);
std::unique_ptr<AnyStream::Impl> make_tls_server(boost::asio::ip::tcp::socket socket, SSL_CTX* ctx);

}  // namespace kubesandbox::net
