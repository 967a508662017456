#include "proto/exec_credential.hpp"
#include "proto/kubeconfig.hpp"

#include <gtest/gtest.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

namespace ks = kubesandbox;
namespace json = boost::json;
using ks::errc;
using namespace std::chrono;

namespace {

std::string bio_text(BIO* bio) {
    char* data = nullptr;
    long len = BIO_get_mem_data(bio, &data);
    return std::string(data, static_cast<std::size_t>(len));
}

std::pair<std::string, std::string> make_cert_and_key() {
    EVP_PKEY* key = EVP_EC_gen("P-256");
    X509* cert = X509_new();
    X509_set_version(cert, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(cert), 7);
    X509_gmtime_adj(X509_getm_notBefore(cert), 0);
    X509_gmtime_adj(X509_getm_notAfter(cert), 3600);
    X509_set_pubkey(cert, key);
    X509_NAME* name = X509_get_subject_name(cert);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("exec-test"), -1, -1,
                               0);
    X509_set_issuer_name(cert, name);
    X509_sign(cert, key, EVP_sha256());
    BIO* b1 = BIO_new(BIO_s_mem());
    PEM_write_bio_X509(b1, cert);
    BIO* b2 = BIO_new(BIO_s_mem());
    PEM_write_bio_PrivateKey(b2, key, nullptr, nullptr, 0, nullptr, nullptr);
    std::pair<std::string, std::string> out{bio_text(b1), bio_text(b2)};
    BIO_free(b1);
    BIO_free(b2);
    X509_free(cert);
    EVP_PKEY_free(key);
    return out;
}

constexpr const char* secret = "SECRET-token-abcdef";

std::string doc(std::string_view api, std::string status_json) {
    return R"({"apiVersion":")" + std::string(api) + R"(","kind":"ExecCredential","status":)" + status_json + "}";
}

void expect_failure_without_secret(const ks::Result<ks::proto::ExecCredentialStatus>& r) {
    ASSERT_FALSE(r);
    EXPECT_TRUE(r.error().is(errc::exec_plugin_failed));
    EXPECT_EQ(r.error().message.find("SECRET"), std::string::npos) << r.error().message;
    EXPECT_EQ(r.error().message.find("PRIVATE"), std::string::npos) << r.error().message;
}

}  // namespace

TEST(Rfc3339, ParsesUtcOffsetsAndFractions) {
    auto t = ks::proto::parse_rfc3339("2026-01-02T15:04:05Z");
    ASSERT_TRUE(t);
    EXPECT_EQ(duration_cast<seconds>(t->time_since_epoch()).count(), 1767366245);
    auto off = ks::proto::parse_rfc3339("2026-01-02T17:04:05+02:00");
    ASSERT_TRUE(off);
    EXPECT_EQ(*off, *t);
    auto neg = ks::proto::parse_rfc3339("2026-01-02T14:34:05-00:30");
    ASSERT_TRUE(neg);
    EXPECT_EQ(*neg, *t);
    auto frac = ks::proto::parse_rfc3339("2026-01-02T15:04:05.25Z");
    ASSERT_TRUE(frac);
    EXPECT_EQ(duration_cast<milliseconds>(*frac - *t).count(), 250);
    auto epoch = ks::proto::parse_rfc3339("1970-01-01T00:00:00Z");
    ASSERT_TRUE(epoch);
    EXPECT_EQ(epoch->time_since_epoch().count(), 0);
    auto leap = ks::proto::parse_rfc3339("2024-02-29T00:00:00z");
    ASSERT_TRUE(leap);
    // Outside what system_clock holds: clamped (long expired / never expires), no overflow.
    EXPECT_EQ(ks::proto::parse_rfc3339("0001-01-01T00:00:00Z"), std::chrono::system_clock::time_point::min());
    EXPECT_EQ(ks::proto::parse_rfc3339("9999-12-31T23:59:59Z"), std::chrono::system_clock::time_point::max());
    EXPECT_EQ(ks::proto::parse_rfc3339("1677-09-21T00:12:43Z"), std::chrono::system_clock::time_point::min());
    for (const char* bad : {"", "2026-01-02", "2026-01-02T15:04:05", "2026-13-02T15:04:05Z", "2025-02-29T00:00:00Z",
                            "2026-01-02T25:04:05Z", "2026-01-02T15:04:05.Z", "2026-01-02T15:04:05Zjunk",
                            "2026-01-02T15:04:05+0200", "garbage-garbage-garbage", "2026/01/02T15:04:05Z"}) {
        EXPECT_FALSE(ks::proto::parse_rfc3339(bad)) << bad;
    }
}

TEST(ExecCredential, ParsesV1Token) {
    auto r = ks::proto::parse_exec_credential(
        doc(ks::proto::exec_api_v1, R"({"token":"abc","expirationTimestamp":"2026-01-02T15:04:05Z"})"),
        ks::proto::exec_api_v1);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->token, "abc");
    ASSERT_TRUE(r->expiry);
    EXPECT_EQ(*r->expiry, *ks::proto::parse_rfc3339("2026-01-02T15:04:05Z"));
    EXPECT_TRUE(r->client_certificate_pem.empty());
}

TEST(ExecCredential, ParsesV1beta1CertAndKeyWithoutExpiry) {
    auto [cert, key] = make_cert_and_key();
    json::object status{{"clientCertificateData", cert}, {"clientKeyData", key}};
    auto r = ks::proto::parse_exec_credential(doc(ks::proto::exec_api_v1beta1, json::serialize(status)), {});
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->client_certificate_pem, cert);
    EXPECT_EQ(r->client_key_pem, key);
    EXPECT_TRUE(r->token.empty());
    EXPECT_FALSE(r->expiry);
}

TEST(ExecCredential, RejectsBadDocumentsWithoutQuotingThem) {
    auto [cert, key] = make_cert_and_key();
    const std::string tok = std::string(R"({"token":")") + secret + "\"}";
    struct Case {
        std::string text;
        std::string expect;
    };
    const Case cases[] = {
        {std::string("not json ") + secret, "not JSON"},
        {"[1,2]", "not a JSON object"},
        {R"({"apiVersion":"client.authentication.k8s.io/v1","kind":"Config","status":)" + tok + "}", "kind"},
        {R"({"apiVersion":"client.authentication.k8s.io/v1alpha1","kind":"ExecCredential","status":)" + tok + "}",
         "apiVersion"},
        {doc(ks::proto::exec_api_v1beta1, tok), "does not match"},  // configured v1
        {R"({"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential"})", "status is missing"},
        {doc(ks::proto::exec_api_v1, "{}"), "neither a token"},
        {doc(ks::proto::exec_api_v1, R"({"token":42})"), "status.token"},
        {doc(ks::proto::exec_api_v1, json::serialize(json::object{{"clientKeyData", key}})), "set together"},
        {doc(ks::proto::exec_api_v1,
             json::serialize(json::object{{"clientKeyData", key}, {"clientCertificateData", "SECRET not pem"}})),
         "not a PEM certificate"},
        {doc(ks::proto::exec_api_v1,
             json::serialize(json::object{{"clientKeyData", cert}, {"clientCertificateData", cert}})),
         "not a PEM private key"},
        {doc(ks::proto::exec_api_v1, std::string(R"({"token":")") + secret + R"(","expirationTimestamp":"soon"})"),
         "expirationTimestamp"},
    };
    for (const auto& c : cases) {
        auto r = ks::proto::parse_exec_credential(c.text, ks::proto::exec_api_v1);
        expect_failure_without_secret(r);
        if (!r) {
            EXPECT_NE(r.error().message.find(c.expect), std::string::npos) << r.error().message;
        }
    }
}

TEST(ExecCredential, ExecInfoWithoutCluster) {
    auto text = ks::proto::make_exec_info(ks::proto::exec_api_v1, std::nullopt);
    auto v = json::parse(text);
    EXPECT_EQ(v.at("apiVersion").as_string(), "client.authentication.k8s.io/v1");
    EXPECT_EQ(v.at("kind").as_string(), "ExecCredential");
    EXPECT_EQ(v.at("spec").at("interactive").as_bool(), false);
    EXPECT_FALSE(v.at("spec").as_object().contains("cluster"));
}

TEST(ExecCredential, ExecInfoWithCluster) {
    auto [cert, key] = make_cert_and_key();
    ks::proto::ExecClusterInfo info;
    info.server = "https://h:6443";
    info.certificate_authority_pem = cert;
    info.tls_server_name = "api.internal";
    info.proxy_url = "http://p:1";
    auto v = json::parse(ks::proto::make_exec_info(ks::proto::exec_api_v1beta1, info));
    EXPECT_EQ(v.at("apiVersion").as_string(), "client.authentication.k8s.io/v1beta1");
    const auto& c = v.at("spec").at("cluster");
    EXPECT_EQ(c.at("server").as_string(), "https://h:6443");
    EXPECT_EQ(c.at("tls-server-name").as_string(), "api.internal");
    EXPECT_EQ(c.at("insecure-skip-tls-verify").as_bool(), false);
    EXPECT_EQ(c.at("proxy-url").as_string(), "http://p:1");
    auto ca = ks::proto::base64_decode(std::string(c.at("certificate-authority-data").as_string()));
    ASSERT_TRUE(ca);
    EXPECT_EQ(*ca, cert);
}
