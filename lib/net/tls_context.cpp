#include "net/tls_context.hpp"

#include "net/tls_session_cache.hpp"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

namespace kubesandbox::net {

namespace asio = boost::asio;

namespace {

Result<void> add_ca_pem(asio::ssl::context& ctx, const std::string& pem) {
    std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), BIO_free);
    X509_STORE* store = SSL_CTX_get_cert_store(ctx.native_handle());
    int added = 0;
    while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
        X509_STORE_add_cert(store, cert);
        X509_free(cert);
        ++added;
    }
    ERR_clear_error();
    if (added == 0) return fail(errc::invalid_config, "certificate-authority: no PEM certificate found");
    return {};
}

}  // namespace

Result<std::shared_ptr<asio::ssl::context>> make_tls_client_context(const TlsClientSettings& settings) {
    auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
    ctx->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                     asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 | asio::ssl::context::no_tlsv1_1);
    if (settings.insecure_skip_verify) {
        ctx->set_verify_mode(asio::ssl::verify_none);
    } else {
        ctx->set_verify_mode(asio::ssl::verify_peer);
        if (!settings.ca_pem.empty()) {
            if (auto r = add_ca_pem(*ctx, settings.ca_pem); !r) return fail(r.error());
        } else {
            boost::system::error_code ec;
            ctx->set_default_verify_paths(ec);
        }
    }
    if (!settings.client_certificate_pem.empty() || !settings.client_key_pem.empty()) {
        boost::system::error_code ec;
        ctx->use_certificate_chain(asio::buffer(settings.client_certificate_pem), ec);
        if (ec) {
            ERR_clear_error();
            return fail(errc::invalid_config, "client-certificate: not a usable PEM certificate");
        }
        ctx->use_private_key(asio::buffer(settings.client_key_pem), asio::ssl::context::pem, ec);
        if (ec) {
            ERR_clear_error();
            return fail(errc::invalid_config, "client-key: not a usable PEM private key matching the certificate");
        }
    }
    enable_session_cache(ctx->native_handle());
    return ctx;
}

}  // namespace kubesandbox::net
