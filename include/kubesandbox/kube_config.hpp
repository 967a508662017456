// Connection settings for one Kubernetes API server, resolved from a kubeconfig, the in-cluster
// service account, or given explicitly (URL + token).
#pragma once

#include <kubesandbox/error.hpp>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kubesandbox {

// users[].user.exec of a kubeconfig: a program printing an ExecCredential.
struct ExecCredentialConfig {
    std::string api_version{};  // client.authentication.k8s.io/v1 or v1beta1
    std::string command{};
    std::vector<std::string> args{};
    std::vector<std::pair<std::string, std::string>> env{};
    bool provide_cluster_info = false;
    std::string install_hint{};
    std::string interactive_mode{};  // Never | IfAvailable | Always; we never attach a TTY
};

struct KubeConfig {
    std::string server{};  // https://host:port[/prefix] or http://127.0.0.1:port
    std::string namespace_name = "default";
    std::string context_name{};
    std::string cluster_name{};
    std::string user_name{};

    // TLS (PEM text, already read from files and base64-decoded)
    std::string certificate_authority_pem{};
    std::string client_certificate_pem{};
    std::string client_key_pem{};
    bool insecure_skip_tls_verify = false;
    std::string tls_server_name{};
    // http://[user:password@]proxy:port (HTTP CONNECT; credentials go in Proxy-Authorization and
    // never into messages); empty = HTTPS_PROXY/NO_PROXY rules.
    std::string proxy_url;

    // Authentication, first that is set wins: token_file, token, exec, basic. token_file wins
    // over token (client-go); token is used only while the file cannot be read. Credentials
    // are refused over plain http:// unless the server is loopback.
    std::string token{};
    std::string token_file;  // re-read periodically (service-account tokens rotate)
    std::optional<ExecCredentialConfig> exec{};
    std::string username{};
    std::string password{};

    // Explicit URL + bearer token.
    static KubeConfig from_url(std::string server, std::string token = {}, std::string namespace_name = "default");
};

struct KubeConfigLoadOptions {
    // Files to merge, in order; empty = $KUBECONFIG (path list) or else ~/.kube/config.
    std::vector<std::filesystem::path> paths{};
    std::optional<std::string> context{};         // overrides current-context
    std::optional<std::string> namespace_name{};  // overrides the context's namespace
};

// Loads and merges kubeconfig files with kubectl's rules (first file to define a name wins,
// current-context from the first file that sets it, relative paths resolved against the file
// that names them). Errors name the file and the field.
Result<KubeConfig> load_kubeconfig(const KubeConfigLoadOptions& options = {});

// Parses one kubeconfig document held in memory; `source` names it in error messages and
// `base_dir` resolves relative certificate and token paths.
Result<KubeConfig> parse_kubeconfig(std::string_view yaml, std::string_view source,
                                    const std::filesystem::path& base_dir, const KubeConfigLoadOptions& options = {});

// KUBERNETES_SERVICE_HOST/PORT plus the service-account directory (token, ca.crt, namespace).
Result<KubeConfig> load_in_cluster_config(
    const std::filesystem::path& service_account_dir = "/var/run/secrets/kubernetes.io/serviceaccount");

// A kubeconfig when one is found, else the in-cluster config.
Result<KubeConfig> load_default_config(const KubeConfigLoadOptions& options = {});

}  // namespace kubesandbox
