// kubeconfig parsing, merging and in-cluster config. Files only (temp dirs), no sockets.
#include <kubesandbox/kube_config.hpp>

#include "proto/kubeconfig.hpp"

#include <gtest/gtest.h>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>

namespace ks = kubesandbox;
namespace fs = std::filesystem;
using ks::errc;

namespace {

struct TestPki {
    std::string cert_pem;
    std::string key_pem;
};

std::string bio_text(BIO* bio) {
    char* data = nullptr;
    long len = BIO_get_mem_data(bio, &data);
    return std::string(data, static_cast<std::size_t>(len));
}

// A fresh self-signed P-256 certificate and its key, made at test time (no key files in git).
const TestPki& test_pki() {
    static const TestPki pki = [] {
        TestPki out;
        EVP_PKEY* key = EVP_EC_gen("P-256");
        X509* cert = X509_new();
        X509_set_version(cert, 2);
        ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
        X509_gmtime_adj(X509_getm_notBefore(cert), 0);
        X509_gmtime_adj(X509_getm_notAfter(cert), 3600);
        X509_set_pubkey(cert, key);
        X509_NAME* name = X509_get_subject_name(cert);
        X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("kubesandbox-test"),
                                   -1, -1, 0);
        X509_set_issuer_name(cert, name);
        X509_sign(cert, key, EVP_sha256());
        BIO* b1 = BIO_new(BIO_s_mem());
        PEM_write_bio_X509(b1, cert);
        out.cert_pem = bio_text(b1);
        BIO_free(b1);
        BIO* b2 = BIO_new(BIO_s_mem());
        PEM_write_bio_PrivateKey(b2, key, nullptr, nullptr, 0, nullptr, nullptr);
        out.key_pem = bio_text(b2);
        BIO_free(b2);
        X509_free(cert);
        EVP_PKEY_free(key);
        return out;
    }();
    return pki;
}

std::string b64(std::string_view s) { return ks::proto::base64_encode(s); }

class TempDir {
public:
    TempDir() {
        std::string tmpl = (fs::temp_directory_path() / "ks-kubeconfig-XXXXXX").string();
        char* p = ::mkdtemp(tmpl.data());
        if (p == nullptr) throw std::runtime_error("mkdtemp failed");
        path_ = p;
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path_, ec);
    }
    const fs::path& path() const { return path_; }
    fs::path write(const fs::path& rel, std::string_view content) const {
        fs::path p = path_ / rel;
        fs::create_directories(p.parent_path());
        std::ofstream(p, std::ios::binary) << content;
        return p;
    }

private:
    fs::path path_;
};

// Sets (or unsets, with nullopt) an environment variable for the scope.
class ScopedEnv {
public:
    ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
        if (const char* old = std::getenv(name)) old_ = old;
        if (value) ::setenv(name, value->c_str(), 1);
        else ::unsetenv(name);
    }
    ~ScopedEnv() {
        if (old_) ::setenv(name_, old_->c_str(), 1);
        else ::unsetenv(name_);
    }

private:
    const char* name_;
    std::optional<std::string> old_;
};

constexpr const char* secret_token = "tok-SECRET-1234567890";
constexpr const char* secret_password = "pw-SECRET-0987654321";

void expect_no_secrets(const ks::Error& e) {
    EXPECT_EQ(e.message.find("SECRET"), std::string::npos) << e.message;
    EXPECT_EQ(e.message.find("PRIVATE KEY"), std::string::npos) << e.message;
    EXPECT_EQ(e.message.find(test_pki().key_pem.substr(40, 20)), std::string::npos) << e.message;
}

}  // namespace

TEST(Pem, ValidatesCertificatesAndKeys) {
    const auto& pki = test_pki();
    EXPECT_TRUE(ks::proto::pem_has_certificates(pki.cert_pem));
    EXPECT_TRUE(ks::proto::pem_has_certificates(pki.cert_pem + pki.cert_pem));
    EXPECT_FALSE(ks::proto::pem_has_certificates(pki.key_pem));
    EXPECT_FALSE(ks::proto::pem_has_certificates("hello"));
    // A truncated DER body between intact BEGIN/END lines.
    const std::string broken = pki.cert_pem.substr(0, pki.cert_pem.find('\n') + 65) + "\n-----END CERTIFICATE-----\n";
    EXPECT_FALSE(ks::proto::pem_has_certificates(pki.cert_pem + broken));
    EXPECT_TRUE(ks::proto::pem_has_private_key(pki.key_pem));
    EXPECT_FALSE(ks::proto::pem_has_private_key(pki.cert_pem));
    EXPECT_FALSE(ks::proto::pem_has_private_key(""));
}

TEST(KubeConfig, ParsesEveryField) {
    const auto& pki = test_pki();
    const std::string yaml = R"(apiVersion: v1
kind: Config
current-context: dev
clusters:
- name: c1
  cluster:
    server: https://10.0.0.1:6443/prefix
    certificate-authority-data: )" +
                             b64(pki.cert_pem) + R"(
    tls-server-name: api.internal
    proxy-url: http://proxy:3128
users:
- name: u1
  user:
    client-certificate-data: )" +
                             b64(pki.cert_pem) + R"(
    client-key-data: )" + b64(pki.key_pem) +
                             R"(
    token: abc.def
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: my-plugin
      args: ["--a", "b"]
      env:
      - name: FOO
        value: bar
      provideClusterInfo: true
      installHint: install it
      interactiveMode: Never
contexts:
- name: dev
  context: {cluster: c1, user: u1, namespace: team-a}
)";
    auto cfg = ks::parse_kubeconfig(yaml, "mem", "/base");
    ASSERT_TRUE(cfg) << cfg.error().message;
    EXPECT_EQ(cfg->server, "https://10.0.0.1:6443/prefix");
    EXPECT_EQ(cfg->context_name, "dev");
    EXPECT_EQ(cfg->cluster_name, "c1");
    EXPECT_EQ(cfg->user_name, "u1");
    EXPECT_EQ(cfg->namespace_name, "team-a");
    EXPECT_EQ(cfg->certificate_authority_pem, pki.cert_pem);
    EXPECT_EQ(cfg->client_certificate_pem, pki.cert_pem);
    EXPECT_EQ(cfg->client_key_pem, pki.key_pem);
    EXPECT_EQ(cfg->tls_server_name, "api.internal");
    EXPECT_EQ(cfg->proxy_url, "http://proxy:3128");
    EXPECT_FALSE(cfg->insecure_skip_tls_verify);
    EXPECT_EQ(cfg->token, "abc.def");
    ASSERT_TRUE(cfg->exec);
    EXPECT_EQ(cfg->exec->api_version, "client.authentication.k8s.io/v1");
    EXPECT_EQ(cfg->exec->command, "my-plugin");  // bare names stay for the PATH lookup
    EXPECT_EQ(cfg->exec->args, (std::vector<std::string>{"--a", "b"}));
    ASSERT_EQ(cfg->exec->env.size(), 1u);
    EXPECT_EQ(cfg->exec->env[0], (std::pair<std::string, std::string>{"FOO", "bar"}));
    EXPECT_TRUE(cfg->exec->provide_cluster_info);
    EXPECT_EQ(cfg->exec->install_hint, "install it");
    EXPECT_EQ(cfg->exec->interactive_mode, "Never");
}

TEST(KubeConfig, BasicAuthInsecureAndDefaults) {
    const std::string yaml = R"(
current-context: x
clusters: [{name: c, cluster: {server: "127.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {username: admin, password: hunter2}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
)";
    auto cfg = ks::parse_kubeconfig(yaml, "mem", {});
    ASSERT_TRUE(cfg) << cfg.error().message;
    EXPECT_EQ(cfg->server, "https://127.0.0.1:6443");  // no scheme means HTTPS, like kubectl
    EXPECT_TRUE(cfg->insecure_skip_tls_verify);
    EXPECT_EQ(cfg->username, "admin");
    EXPECT_EQ(cfg->password, "hunter2");
    EXPECT_EQ(cfg->namespace_name, "default");
    EXPECT_TRUE(cfg->token.empty());
    EXPECT_FALSE(cfg->exec);
}

TEST(KubeConfig, ContextWithoutUserIsAnonymous) {
    auto cfg = ks::parse_kubeconfig(
        "current-context: x\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:8080'}}]\n"
        "contexts: [{name: x, context: {cluster: c}}]\n",
        "mem", {});
    ASSERT_TRUE(cfg) << cfg.error().message;
    EXPECT_EQ(cfg->server, "http://127.0.0.1:8080");
    EXPECT_TRUE(cfg->user_name.empty());
}

TEST(KubeConfig, MergesThreeFilesFirstDefinitionWins) {
    TempDir dir;
    auto f1 = dir.write("one/config", R"(
clusters:
- name: shared
  cluster: {server: https://first:1}
users:
- name: alice
  user: {token: first-token}
contexts:
- name: a
  context: {cluster: shared, user: alice, namespace: from-first}
)");
    auto f2 = dir.write("two/config", R"(
current-context: b
clusters:
- name: shared
  cluster: {server: https://second:2, tls-server-name: never-merged}
- name: only-second
  cluster: {server: https://second-only:2}
users:
- name: alice
  user: {token: second-token}
contexts:
- name: a
  context: {cluster: only-second, user: alice, namespace: from-second}
- name: b
  context: {cluster: shared, user: alice}
)");
    auto f3 = dir.write("three/config", R"(
current-context: c
contexts:
- name: c
  context: {cluster: only-second}
)");
    ks::KubeConfigLoadOptions opts;
    opts.paths = {f1, f2, f3};
    auto cfg = ks::load_kubeconfig(opts);
    ASSERT_TRUE(cfg) << cfg.error().message;
    // current-context from the first file that sets it (file two), not file three.
    EXPECT_EQ(cfg->context_name, "b");
    EXPECT_EQ(cfg->server, "https://first:1");
    EXPECT_TRUE(cfg->tls_server_name.empty());  // entries are taken whole, never field-merged
    EXPECT_EQ(cfg->token, "first-token");

    opts.context = "a";
    cfg = ks::load_kubeconfig(opts);
    ASSERT_TRUE(cfg) << cfg.error().message;
    EXPECT_EQ(cfg->server, "https://first:1");  // context "a" from file one
    EXPECT_EQ(cfg->namespace_name, "from-first");

    opts.context = "c";
    cfg = ks::load_kubeconfig(opts);
    ASSERT_TRUE(cfg) << cfg.error().message;
    EXPECT_EQ(cfg->server, "https://second-only:2");

    // Order matters: with file three first, its current-context wins.
    opts.context.reset();
    opts.paths = {f3, f2, f1};
    cfg = ks::load_kubeconfig(opts);
    ASSERT_TRUE(cfg) << cfg.error().message;
    EXPECT_EQ(cfg->context_name, "c");
}

TEST(KubeConfig, KubeconfigEnvSkipsMissingFilesAndDeduplicates) {
    TempDir dir;
    auto f1 = dir.write("a", "current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n");
    auto f2 = dir.write("b", "clusters: [{name: c, cluster: {server: 'https://b:1'}}]\n");
    ScopedEnv env("KUBECONFIG",
                  (dir.path() / "missing").string() + ":" + f1.string() + "::" + f1.string() + ":" + f2.string());
    auto cfg = ks::load_kubeconfig();
    ASSERT_TRUE(cfg) << cfg.error().message;
    EXPECT_EQ(cfg->server, "https://b:1");
    EXPECT_EQ(cfg->context_name, "x");
}

TEST(KubeConfig, NoFilesAtAllIsAnError) {
    TempDir dir;
    ScopedEnv env("KUBECONFIG", (dir.path() / "nope1").string() + ":" + (dir.path() / "nope2").string());
    auto cfg = ks::load_kubeconfig();
    ASSERT_FALSE(cfg);
    EXPECT_TRUE(cfg.error().is(errc::invalid_config));
    EXPECT_NE(cfg.error().message.find("no configuration has been provided"), std::string::npos);

    ScopedEnv no_env("KUBECONFIG", std::nullopt);
    ScopedEnv home("HOME", dir.path().string());
    cfg = ks::load_kubeconfig();
    ASSERT_FALSE(cfg);
    EXPECT_NE(cfg.error().message.find(".kube/config"), std::string::npos) << cfg.error().message;
}

TEST(KubeConfig, ExplicitMissingPathIsAnError) {
    TempDir dir;
    ks::KubeConfigLoadOptions opts;
    opts.paths = {dir.path() / "absent"};
    auto cfg = ks::load_kubeconfig(opts);
    ASSERT_FALSE(cfg);
    EXPECT_TRUE(cfg.error().is(errc::invalid_config));
    EXPECT_NE(cfg.error().message.find((dir.path() / "absent").string()), std::string::npos);
}

TEST(KubeConfig, UnreadableExistingFileIsAnError) {
    TempDir dir;
    fs::create_directories(dir.path() / "config-dir");  // exists, but cannot be read as a file
    auto good = dir.write("good", "current-context: x\n");
    ScopedEnv env("KUBECONFIG", good.string() + ":" + (dir.path() / "config-dir").string());
    auto cfg = ks::load_kubeconfig();
    ASSERT_FALSE(cfg);
    EXPECT_TRUE(cfg.error().is(errc::invalid_config));
    EXPECT_NE(cfg.error().message.find("config-dir"), std::string::npos) << cfg.error().message;
    EXPECT_NE(cfg.error().message.find("cannot read"), std::string::npos) << cfg.error().message;
}

TEST(KubeConfig, RelativePathsResolveAgainstTheDefiningFile) {
    const auto& pki = test_pki();
    TempDir dir;
    dir.write("clusters/pki/ca.pem", pki.cert_pem);
    dir.write("users/creds/client.crt", pki.cert_pem);
    dir.write("users/creds/client.key", pki.key_pem);
    auto f1 = dir.write("clusters/config", R"(
current-context: x
clusters: [{name: c, cluster: {server: 'https://h:1', certificate-authority: pki/ca.pem}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
)");
    auto f2 = dir.write("users/config", R"(
users:
- name: u
  user:
    client-certificate: creds/client.crt
    client-key: creds/client.key
    tokenFile: creds/token
    exec: {apiVersion: client.authentication.k8s.io/v1beta1, command: ./bin/plugin}
)");
    ks::KubeConfigLoadOptions opts;
    opts.paths = {f1, f2};
    auto cfg = ks::load_kubeconfig(opts);
    ASSERT_TRUE(cfg) << cfg.error().message;
    EXPECT_EQ(cfg->certificate_authority_pem, pki.cert_pem);
    EXPECT_EQ(cfg->client_certificate_pem, pki.cert_pem);
    EXPECT_EQ(cfg->client_key_pem, pki.key_pem);
    EXPECT_EQ(fs::path(cfg->token_file), dir.path() / "users" / "creds/token");
    ASSERT_TRUE(cfg->exec);
    EXPECT_EQ(fs::path(cfg->exec->command), dir.path() / "users" / "./bin/plugin");
    EXPECT_EQ(cfg->exec->interactive_mode, "IfAvailable");  // v1beta1 default

    // parse_kubeconfig resolves against its base_dir; absolute paths stay as they are.
    auto mem = ks::parse_kubeconfig(
        "current-context: x\nclusters: [{name: c, cluster: {server: 'https://h:1', certificate-authority: " +
            (dir.path() / "clusters/pki/ca.pem").string() +
            "}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
            "users: [{name: u, user: {client-certificate: client.crt, client-key: client.key}}]\n",
        "mem", dir.path() / "users/creds");
    ASSERT_TRUE(mem) << mem.error().message;
    EXPECT_EQ(mem->certificate_authority_pem, pki.cert_pem);
    EXPECT_EQ(mem->client_key_pem, pki.key_pem);
}

TEST(KubeConfig, InlineDataWinsOverFiles) {
    const auto& pki = test_pki();
    // The named files do not exist: -data must win without touching them.
    auto cfg = ks::parse_kubeconfig(
        "current-context: x\nclusters: [{name: c, cluster: {server: 'https://h:1', certificate-authority: /nope/ca, "
        "certificate-authority-data: " +
            b64(pki.cert_pem) +
            "}}]\n"
            "users: [{name: u, user: {client-certificate: /nope/crt, client-certificate-data: " +
            b64(pki.cert_pem) + ", client-key: /nope/key, client-key-data: " + b64(pki.key_pem) +
            "}}]\n"
            "contexts: [{name: x, context: {cluster: c, user: u}}]\n",
        "mem", "/base");
    ASSERT_TRUE(cfg) << cfg.error().message;
    EXPECT_EQ(cfg->certificate_authority_pem, pki.cert_pem);
    EXPECT_EQ(cfg->client_key_pem, pki.key_pem);
}

TEST(KubeConfig, MissingReferencedFileNamesFileAndField) {
    auto cfg = ks::parse_kubeconfig(
        "current-context: x\nclusters: [{name: c, cluster: {server: 'https://h:1', certificate-authority: ca.pem}}]\n"
        "contexts: [{name: x, context: {cluster: c}}]\n",
        "/etc/kc", "/nonexistent-dir");
    ASSERT_FALSE(cfg);
    EXPECT_TRUE(cfg.error().is(errc::invalid_config));
    EXPECT_NE(cfg.error().message.find("kubeconfig /etc/kc: clusters[c].cluster.certificate-authority: cannot read "
                                       "/nonexistent-dir/ca.pem"),
              std::string::npos)
        << cfg.error().message;
}

TEST(KubeConfig, BadYamlIsInvalidConfig) {
    for (const char* doc :
         {"clusters: [", "{{{", "- just\n- a list\n", "clusters: 3\n", "clusters: [{cluster: {server: x}}]\n",
          "current-context: [a]\n", "kind: Pod\n", "clusters: [{name: c, cluster: [1, 2]}]\n", "\t\"unterminated"}) {
        auto cfg = ks::parse_kubeconfig(doc, "/my/config", {});
        ASSERT_FALSE(cfg) << doc;
        EXPECT_TRUE(cfg.error().is(errc::invalid_config)) << doc;
        EXPECT_NE(cfg.error().message.find("/my/config"), std::string::npos) << cfg.error().message;
    }
}

TEST(KubeConfig, BadFieldTypes) {
    auto cfg = ks::parse_kubeconfig(
        "current-context: x\nclusters: [{name: c, cluster: {server: 'https://h:1', insecure-skip-tls-verify: maybe}}]\n"
        "contexts: [{name: x, context: {cluster: c}}]\n",
        "mem", {});
    ASSERT_FALSE(cfg);
    EXPECT_NE(cfg.error().message.find("clusters[c].cluster.insecure-skip-tls-verify"), std::string::npos)
        << cfg.error().message;

    cfg = ks::parse_kubeconfig(
        "current-context: x\nclusters: [{name: c, cluster: {server: {a: b}}}]\n"
        "contexts: [{name: x, context: {cluster: c}}]\n",
        "mem", {});
    ASSERT_FALSE(cfg);
    EXPECT_NE(cfg.error().message.find("clusters[c].cluster.server"), std::string::npos) << cfg.error().message;
}

TEST(KubeConfig, MissingContextClusterOrUserNamesIt) {
    const std::string base =
        "clusters: [{name: c, cluster: {server: 'https://h:1'}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: ghost}},"
        " {name: y, context: {cluster: nocluster}}]\n";
    auto cfg = ks::parse_kubeconfig(base + "current-context: missing-ctx\n", "mem", {});
    ASSERT_FALSE(cfg);
    EXPECT_TRUE(cfg.error().is(errc::invalid_config));
    EXPECT_NE(cfg.error().message.find("context \"missing-ctx\" not found"), std::string::npos) << cfg.error().message;

    ks::KubeConfigLoadOptions opts;
    opts.context = "other-missing";
    cfg = ks::parse_kubeconfig(base + "current-context: x\n", "mem", {}, opts);
    ASSERT_FALSE(cfg);
    EXPECT_NE(cfg.error().message.find("\"other-missing\""), std::string::npos) << cfg.error().message;

    cfg = ks::parse_kubeconfig(base, "mem", {});
    ASSERT_FALSE(cfg);
    EXPECT_NE(cfg.error().message.find("no current-context"), std::string::npos) << cfg.error().message;

    cfg = ks::parse_kubeconfig(base + "current-context: x\n", "mem", {});
    ASSERT_FALSE(cfg);
    EXPECT_NE(cfg.error().message.find("user \"ghost\" not found"), std::string::npos) << cfg.error().message;

    cfg = ks::parse_kubeconfig(base + "current-context: y\n", "mem", {});
    ASSERT_FALSE(cfg);
    EXPECT_NE(cfg.error().message.find("cluster \"nocluster\" not found"), std::string::npos) << cfg.error().message;
}

TEST(KubeConfig, BadBase64NamesFileAndField) {
    const auto& pki = test_pki();
    ks::KubeConfigLoadOptions opts;
    TempDir dir;
    auto path = dir.write("config",
                          "current-context: x\nclusters: [{name: c, cluster: {server: 'https://h:1'}}]\n"
                          "contexts: [{name: x, context: {cluster: c, user: dev}}]\n"
                          "users: [{name: dev, user: {client-certificate-data: " +
                              b64(pki.cert_pem) + ", client-key-data: 'LS0t!!SECRET-not-base64'}}]\n");
    opts.paths = {path};
    auto cfg = ks::load_kubeconfig(opts);
    ASSERT_FALSE(cfg);
    EXPECT_TRUE(cfg.error().is(errc::invalid_config));
    EXPECT_EQ(cfg.error().message, "kubeconfig " + path.string() + ": users[dev].user.client-key-data: invalid base64");
    expect_no_secrets(cfg.error());

    cfg = ks::parse_kubeconfig(
        "current-context: x\nclusters: [{name: c, cluster: {server: 'https://h:1', certificate-authority-data: "
        "'%%%'}}]\ncontexts: [{name: x, context: {cluster: c}}]\n",
        "/k", {});
    ASSERT_FALSE(cfg);
    EXPECT_EQ(cfg.error().message, "kubeconfig /k: clusters[c].cluster.certificate-authority-data: invalid base64");
}

TEST(KubeConfig, BadPemNamesFileAndFieldWithoutLeakingKeys) {
    const auto& pki = test_pki();
    const std::string ctx = "current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n";
    // Valid base64, but the CA is a key, not a certificate.
    auto cfg = ks::parse_kubeconfig(ctx +
                                        "clusters: [{name: c, cluster: {server: 'https://h:1', "
                                        "certificate-authority-data: " +
                                        b64(pki.key_pem) +
                                        "}}]\n"
                                        "users: [{name: u, user: {}}]\n",
                                    "/k", {});
    ASSERT_FALSE(cfg);
    EXPECT_EQ(cfg.error().message,
              "kubeconfig /k: clusters[c].cluster.certificate-authority-data: not a valid PEM certificate");
    expect_no_secrets(cfg.error());

    // The key is a certificate.
    cfg = ks::parse_kubeconfig(ctx +
                                   "clusters: [{name: c, cluster: {server: 'https://h:1'}}]\n"
                                   "users: [{name: u, user: {client-certificate-data: " +
                                   b64(pki.cert_pem) + ", client-key-data: " +
                                   b64(std::string("SECRET garbage ") + pki.key_pem.substr(30)) + "}}]\n",
                               "/k", {});
    ASSERT_FALSE(cfg);
    EXPECT_EQ(cfg.error().message, "kubeconfig /k: users[u].user.client-key-data: not a valid PEM private key");
    expect_no_secrets(cfg.error());

    // A file holding garbage.
    TempDir dir;
    dir.write("key.pem", "SECRET not a key\n");
    dir.write("crt.pem", pki.cert_pem);
    cfg = ks::parse_kubeconfig(ctx +
                                   "clusters: [{name: c, cluster: {server: 'https://h:1'}}]\n"
                                   "users: [{name: u, user: {client-certificate: crt.pem, client-key: key.pem}}]\n",
                               "/k", dir.path());
    ASSERT_FALSE(cfg);
    EXPECT_EQ(cfg.error().message, "kubeconfig /k: users[u].user.client-key: " + (dir.path() / "key.pem").string() +
                                       " is not a valid PEM private key");
    expect_no_secrets(cfg.error());

    // Certificate without key.
    cfg = ks::parse_kubeconfig(ctx +
                                   "clusters: [{name: c, cluster: {server: 'https://h:1'}}]\n"
                                   "users: [{name: u, user: {client-certificate: crt.pem}}]\n",
                               "/k", dir.path());
    ASSERT_FALSE(cfg);
    EXPECT_NE(cfg.error().message.find("users[u].user.client-key: missing"), std::string::npos) << cfg.error().message;
}

TEST(KubeConfig, ConflictingSettingsAreErrorsWithoutSecrets) {
    const auto& pki = test_pki();
    const std::string ctx = "current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n";
    auto cfg = ks::parse_kubeconfig(ctx +
                                        "clusters: [{name: c, cluster: {server: 'https://h:1'}}]\n"
                                        "users: [{name: u, user: {token: " +
                                        secret_token + ", username: admin, password: " + secret_password + "}}]\n",
                                    "/k", {});
    ASSERT_FALSE(cfg);
    EXPECT_TRUE(cfg.error().is(errc::invalid_config));
    EXPECT_NE(cfg.error().message.find("users[u].user"), std::string::npos) << cfg.error().message;
    expect_no_secrets(cfg.error());

    cfg = ks::parse_kubeconfig(ctx +
                                   "clusters: [{name: c, cluster: {server: 'https://h:1', "
                                   "insecure-skip-tls-verify: true, certificate-authority-data: " +
                                   b64(pki.cert_pem) + "}}]\nusers: [{name: u, user: {}}]\n",
                               "/k", {});
    ASSERT_FALSE(cfg);
    EXPECT_NE(cfg.error().message.find("insecure-skip-tls-verify"), std::string::npos) << cfg.error().message;
}

TEST(KubeConfig, ExecValidation) {
    const std::string head =
        "current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
        "clusters: [{name: c, cluster: {server: 'https://h:1'}}]\n";
    auto cfg = ks::parse_kubeconfig(
        head + "users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: p}}}]\n", "/k",
        {});
    ASSERT_FALSE(cfg);
    EXPECT_NE(cfg.error().message.find("users[u].user.exec.interactiveMode"), std::string::npos) << cfg.error().message;
    cfg = ks::parse_kubeconfig(
        head + "users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1alpha1, command: p}}}]\n",
        "/k", {});
    ASSERT_FALSE(cfg);
    EXPECT_NE(cfg.error().message.find("exec.apiVersion"), std::string::npos) << cfg.error().message;
    cfg = ks::parse_kubeconfig(
        head + "users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1beta1}}}]\n", "/k", {});
    ASSERT_FALSE(cfg);
    EXPECT_NE(cfg.error().message.find("exec.command: missing"), std::string::npos) << cfg.error().message;
    cfg = ks::parse_kubeconfig(head +
                                   "users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/"
                                   "v1beta1, command: p, env: [{name: A}, {value: b}]}}}]\n",
                               "/k", {});
    ASSERT_FALSE(cfg);
    EXPECT_NE(cfg.error().message.find("exec.env"), std::string::npos) << cfg.error().message;
}

TEST(KubeConfig, ContextAndNamespaceOverrides) {
    const std::string yaml =
        "current-context: a\n"
        "clusters: [{name: c1, cluster: {server: 'https://one:1'}},"
        " {name: c2, cluster: {server: 'https://two:2'}}]\n"
        "contexts: [{name: a, context: {cluster: c1, namespace: ns-a}},"
        " {name: b, context: {cluster: c2}}]\n";
    ks::KubeConfigLoadOptions opts;
    auto cfg = ks::parse_kubeconfig(yaml, "mem", {}, opts);
    ASSERT_TRUE(cfg);
    EXPECT_EQ(cfg->server, "https://one:1");
    EXPECT_EQ(cfg->namespace_name, "ns-a");
    opts.context = "b";
    cfg = ks::parse_kubeconfig(yaml, "mem", {}, opts);
    ASSERT_TRUE(cfg);
    EXPECT_EQ(cfg->server, "https://two:2");
    EXPECT_EQ(cfg->context_name, "b");
    EXPECT_EQ(cfg->namespace_name, "default");
    opts.namespace_name = "explicit";
    cfg = ks::parse_kubeconfig(yaml, "mem", {}, opts);
    ASSERT_TRUE(cfg);
    EXPECT_EQ(cfg->namespace_name, "explicit");
    opts.context.reset();
    cfg = ks::parse_kubeconfig(yaml, "mem", {}, opts);
    ASSERT_TRUE(cfg);
    EXPECT_EQ(cfg->namespace_name, "explicit");  // explicit beats the context's namespace
}

TEST(KubeConfig, EmptyDocumentHasNoContext) {
    auto cfg = ks::parse_kubeconfig("", "mem", {});
    ASSERT_FALSE(cfg);
    EXPECT_TRUE(cfg.error().is(errc::invalid_config));
}

TEST(KubeConfig, FromUrl) {
    auto cfg = ks::KubeConfig::from_url("http://127.0.0.1:8080", "t", "ns");
    EXPECT_EQ(cfg.server, "http://127.0.0.1:8080");
    EXPECT_EQ(cfg.token, "t");
    EXPECT_EQ(cfg.namespace_name, "ns");
    EXPECT_EQ(ks::KubeConfig::from_url("http://x").namespace_name, "default");
}

TEST(InClusterConfig, ReadsServiceAccountDirectory) {
    const auto& pki = test_pki();
    TempDir dir;
    dir.write("token", std::string(secret_token) + "\n");
    dir.write("ca.crt", pki.cert_pem);
    dir.write("namespace", "team-b\n");
    ScopedEnv host("KUBERNETES_SERVICE_HOST", "10.96.0.1");
    ScopedEnv port("KUBERNETES_SERVICE_PORT", "443");
    ScopedEnv pod_ns("POD_NAMESPACE", std::nullopt);
    auto cfg = ks::load_in_cluster_config(dir.path());
    ASSERT_TRUE(cfg) << cfg.error().message;
    EXPECT_EQ(cfg->server, "https://10.96.0.1:443");
    EXPECT_EQ(cfg->certificate_authority_pem, pki.cert_pem);
    EXPECT_EQ(fs::path(cfg->token_file), dir.path() / "token");
    EXPECT_TRUE(cfg->token.empty());  // the file is re-read by the client (rotation)
    EXPECT_EQ(cfg->namespace_name, "team-b");

    {
        ScopedEnv ns("POD_NAMESPACE", "from-env");
        cfg = ks::load_in_cluster_config(dir.path());
        ASSERT_TRUE(cfg);
        EXPECT_EQ(cfg->namespace_name, "from-env");
    }
    fs::remove(dir.path() / "namespace");
    cfg = ks::load_in_cluster_config(dir.path());
    ASSERT_TRUE(cfg);
    EXPECT_EQ(cfg->namespace_name, "default");

    ScopedEnv v6("KUBERNETES_SERVICE_HOST", "fd00::1");
    cfg = ks::load_in_cluster_config(dir.path());
    ASSERT_TRUE(cfg);
    EXPECT_EQ(cfg->server, "https://[fd00::1]:443");
}

TEST(InClusterConfig, ErrorsWithoutEnvOrToken) {
    TempDir dir;
    {
        ScopedEnv host("KUBERNETES_SERVICE_HOST", std::nullopt);
        ScopedEnv port("KUBERNETES_SERVICE_PORT", "443");
        auto cfg = ks::load_in_cluster_config(dir.path());
        ASSERT_FALSE(cfg);
        EXPECT_TRUE(cfg.error().is(errc::invalid_config));
        EXPECT_NE(cfg.error().message.find("KUBERNETES_SERVICE_HOST"), std::string::npos);
    }
    ScopedEnv host("KUBERNETES_SERVICE_HOST", "10.0.0.1");
    ScopedEnv port("KUBERNETES_SERVICE_PORT", "6443");
    auto cfg = ks::load_in_cluster_config(dir.path());
    ASSERT_FALSE(cfg);
    EXPECT_NE(cfg.error().message.find("token"), std::string::npos) << cfg.error().message;
    dir.write("token", secret_token);
    dir.write("ca.crt", "SECRET not a cert");
    cfg = ks::load_in_cluster_config(dir.path());
    ASSERT_FALSE(cfg);
    EXPECT_NE(cfg.error().message.find("ca.crt"), std::string::npos) << cfg.error().message;
    expect_no_secrets(cfg.error());
    fs::remove(dir.path() / "ca.crt");  // no CA: the system store is used
    cfg = ks::load_in_cluster_config(dir.path());
    ASSERT_TRUE(cfg) << cfg.error().message;
    EXPECT_EQ(cfg->server, "https://10.0.0.1:6443");
}

TEST(DefaultConfig, PrefersKubeconfigElseInCluster) {
    TempDir dir;
    ScopedEnv host("KUBERNETES_SERVICE_HOST", "10.0.0.9");
    ScopedEnv port("KUBERNETES_SERVICE_PORT", "443");
    ScopedEnv kc("KUBECONFIG", (dir.path() / "absent").string());
    // No kubeconfig: the in-cluster config (whose default directory does not exist here) is tried.
    auto cfg = ks::load_default_config();
    ASSERT_FALSE(cfg);
    EXPECT_NE(cfg.error().message.find("in-cluster"), std::string::npos) << cfg.error().message;

    auto f = dir.write("kc",
                       "current-context: x\nclusters: [{name: c, cluster: {server: 'https://kc:1'}}]\n"
                       "contexts: [{name: x, context: {cluster: c}}]\n");
    ScopedEnv kc2("KUBECONFIG", f.string());
    cfg = ks::load_default_config();
    ASSERT_TRUE(cfg) << cfg.error().message;
    EXPECT_EQ(cfg->server, "https://kc:1");
}

TEST(KubeConfigHostile, DeepNestingIsRejectedNotAStackOverflow) {
    const std::string flow(200000, '[');
    auto r = kubesandbox::parse_kubeconfig(flow, "deep", "/tmp");
    ASSERT_FALSE(r.has_value());
    EXPECT_TRUE(r.error().is(kubesandbox::errc::invalid_config));
    std::string dashes;
    for (int i = 0; i < 50000; ++i) dashes += "- ";
    dashes += "x\n";
    auto d = kubesandbox::parse_kubeconfig(dashes, "dashes", "/tmp");
    ASSERT_FALSE(d.has_value());
    EXPECT_NE(d.error().message.find("nested"), std::string::npos);
}
