#include "local/tls_certs.hpp"

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>

namespace kubesandbox::local {
namespace {

struct PkeyFree {
    void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct X509Free {
    void operator()(X509* p) const { X509_free(p); }
};
struct BioFree {
    void operator()(BIO* p) const { BIO_free(p); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;
using Cert = std::unique_ptr<X509, X509Free>;
using Bio = std::unique_ptr<BIO, BioFree>;

Pkey make_key() { return Pkey(EVP_EC_gen("P-256")); }

std::string bio_string(BIO* bio) {
    char* data = nullptr;
    long len = BIO_get_mem_data(bio, &data);
    return std::string(data, static_cast<std::size_t>(len));
}

bool add_ext(X509* cert, X509* issuer, int nid, const char* value) {
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
    if (!ext) return false;
    bool ok = X509_add_ext(cert, ext, -1) == 1;
    X509_EXTENSION_free(ext);
    return ok;
}

Cert make_cert(EVP_PKEY* key, const char* cn, X509* issuer, EVP_PKEY* issuer_key, bool is_ca) {
    Cert cert(X509_new());
    if (!cert) return nullptr;
    X509_set_version(cert.get(), 2);
    unsigned char serial[16];
    RAND_bytes(serial, sizeof serial);
    serial[0] &= 0x7f;
    BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
    BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get()));
    BN_free(bn);
    X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
    X509_gmtime_adj(X509_getm_notAfter(cert.get()), 365L * 24 * 3600);
    X509_set_pubkey(cert.get(), key);
    X509_NAME* name = X509_get_subject_name(cert.get());
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn), -1, -1, 0);
    X509* iss = issuer ? issuer : cert.get();
    X509_set_issuer_name(cert.get(), X509_get_subject_name(iss));
    bool ok = true;
    if (is_ca) {
        ok = ok && add_ext(cert.get(), iss, NID_basic_constraints, "critical,CA:TRUE");
        ok = ok && add_ext(cert.get(), iss, NID_key_usage, "critical,keyCertSign,cRLSign,digitalSignature");
        ok = ok && add_ext(cert.get(), iss, NID_subject_key_identifier, "hash");
    } else {
        ok = ok && add_ext(cert.get(), iss, NID_basic_constraints, "critical,CA:FALSE");
        ok = ok && add_ext(cert.get(), iss, NID_key_usage, "critical,digitalSignature");
        ok = ok && add_ext(cert.get(), iss, NID_ext_key_usage, "serverAuth");
        ok = ok && add_ext(cert.get(), iss, NID_subject_alt_name, "IP:127.0.0.1,IP:::1,DNS:localhost");
        ok = ok && add_ext(cert.get(), iss, NID_authority_key_identifier, "keyid");
    }
    if (!ok) return nullptr;
    if (X509_sign(cert.get(), issuer_key, EVP_sha256()) == 0) return nullptr;
    return cert;
}

}  // namespace

Result<ServingCerts> generate_serving_certs() {
    Pkey ca_key = make_key();
    Pkey key = make_key();
    if (!ca_key || !key) return fail(errc::tls_error, "cannot generate an ECDSA P-256 key");
    Cert ca = make_cert(ca_key.get(), "kubesandbox-local-ca", nullptr, ca_key.get(), true);
    if (!ca) return fail(errc::tls_error, "cannot build the local CA certificate");
    Cert cert = make_cert(key.get(), "kubesandbox-local", ca.get(), ca_key.get(), false);
    if (!cert) return fail(errc::tls_error, "cannot build the serving certificate");
    ServingCerts out;
    Bio b1(BIO_new(BIO_s_mem())), b2(BIO_new(BIO_s_mem())), b3(BIO_new(BIO_s_mem()));
    if (!b1 || !b2 || !b3 || PEM_write_bio_X509(b1.get(), ca.get()) != 1 ||
        PEM_write_bio_X509(b2.get(), cert.get()) != 1 ||
        PEM_write_bio_PrivateKey(b3.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr) != 1)
        return fail(errc::tls_error, "cannot encode the local certificates as PEM");
    out.ca_pem = bio_string(b1.get());
    out.cert_pem = bio_string(b2.get());
    out.key_pem = bio_string(b3.get());
    return out;
}

}  // namespace kubesandbox::local
