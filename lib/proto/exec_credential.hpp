// ExecCredential documents (client.authentication.k8s.io/v1 and v1beta1): parsing what an exec
// credential plugin prints, and building the KUBERNETES_EXEC_INFO it receives. Sans-IO.
#pragma once

#include <kubesandbox/error.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace kubesandbox::proto {

inline constexpr std::string_view exec_api_v1 = "client.authentication.k8s.io/v1";
inline constexpr std::string_view exec_api_v1beta1 = "client.authentication.k8s.io/v1beta1";

struct ExecCredentialStatus {
    std::string token;
    std::string client_certificate_pem;  // PEM text as printed (not base64)
    std::string client_key_pem;
    std::optional<std::chrono::system_clock::time_point> expiry;  // none = never expires
};

// Parses a plugin's stdout. `expected_api_version` empty accepts v1 and v1beta1. Errors are
// errc::exec_plugin_failed and never quote the document (it holds secrets).
Result<ExecCredentialStatus> parse_exec_credential(std::string_view json, std::string_view expected_api_version = {});

// RFC 3339 date-time ("2026-01-02T15:04:05Z", fractional seconds and offsets allowed).
std::optional<std::chrono::system_clock::time_point> parse_rfc3339(std::string_view text) noexcept;

// What a plugin learns about the cluster when provideClusterInfo is set.
struct ExecClusterInfo {
    std::string server;
    std::string certificate_authority_pem;  // sent base64-encoded
    std::string tls_server_name;
    bool insecure_skip_tls_verify = false;
    std::string proxy_url;
};

// The KUBERNETES_EXEC_INFO value:
// {"apiVersion":..,"kind":"ExecCredential","spec":{"interactive":false[,"cluster":{..}]}}.
std::string make_exec_info(std::string_view api_version, const std::optional<ExecClusterInfo>& cluster);

}  // namespace kubesandbox::proto
