// Client TLS contexts: TLS 1.2+, the server checked against a CA bundle (or the system's),
// optional client certificate, session resumption (net/tls_session_cache.hpp). Shared by every
// connection to one server.
#pragma once

#include <kubesandbox/error.hpp>

#include <boost/asio/ssl/context.hpp>

#include <memory>
#include <string>

namespace kubesandbox::net {

struct TlsClientSettings {
    std::string ca_pem{};  // empty = the system's trust store
    bool insecure_skip_verify{false};
    std::string client_certificate_pem{};
    std::string client_key_pem{};
};

// errc::invalid_config when a PEM is unusable.
Result<std::shared_ptr<boost::asio::ssl::context>> make_tls_client_context(const TlsClientSettings& settings);

}  // namespace kubesandbox::net
