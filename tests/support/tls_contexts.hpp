// The TLS tests' two contexts: a server's, with a certificate made for the test that names
// 127.0.0.1, ::1 and localhost, and a client's that trusts the CA behind it.
#pragma once

#include "local/tls_certs.hpp"
#include "net/tls_context.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/asio/ssl/context.hpp>

#include <gtest/gtest.h>

#include <memory>

namespace kubesandbox::test {

// Call under ASSERT_NO_FATAL_FAILURE: a context that could not be made fails the test.
inline void make_tls_contexts(boost::asio::ssl::context& server, std::shared_ptr<boost::asio::ssl::context>& client) {
    auto certs = local::generate_serving_certs();
    ASSERT_TRUE(certs.has_value());
    server.use_certificate_chain(boost::asio::buffer(certs->cert_pem));
    server.use_private_key(boost::asio::buffer(certs->key_pem), boost::asio::ssl::context::pem);
    net::TlsClientSettings settings;
    settings.ca_pem = certs->ca_pem;
    auto made = net::make_tls_client_context(settings);
    ASSERT_TRUE(made.has_value());
    client = *made;
}

}  // namespace kubesandbox::test
