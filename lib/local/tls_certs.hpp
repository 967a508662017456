// A throwaway certificate authority and a serving certificate for the local cluster (loopback
// names only), generated at start-up with OpenSSL 3.
#pragma once

#include <kubesandbox/error.hpp>

#include <string>

namespace kubesandbox::local {

struct ServingCerts {
    std::string ca_pem;    // the CA certificate clients trust
    std::string cert_pem;  // server certificate (127.0.0.1, ::1, localhost), signed by the CA
    std::string key_pem;   // server private key (PKCS#8)
};

// ECDSA P-256 keys, SHA-256 signatures, valid from one hour ago for a year.
Result<ServingCerts> generate_serving_certs();

}  // namespace kubesandbox::local
