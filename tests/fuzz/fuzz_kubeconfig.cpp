// libFuzzer target: kubeconfig and ExecCredential parsing must never crash or throw.
// clang++-14 -std=c++20 -fsanitize=fuzzer,address -I include -I lib tests/fuzz/fuzz_kubeconfig.cpp \
//   lib/proto/kubeconfig.cpp lib/proto/exec_credential.cpp lib/error.cpp \
//   -lyaml-cpp -lboost_json -lssl -lcrypto
#include <kubesandbox/kube_config.hpp>

#include "proto/exec_credential.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    // A base dir that does not exist keeps relative paths from reading real files.
    auto cfg = kubesandbox::parse_kubeconfig(text, "fuzz", "/nonexistent-kubesandbox-fuzz");
    if (cfg) {
        // Successful results must be self-consistent.
        if (cfg->server.empty() || cfg->context_name.empty()) __builtin_trap();
    }
    kubesandbox::KubeConfigLoadOptions opts;
    opts.context = "dev";
    opts.namespace_name = "ns";
    (void)kubesandbox::parse_kubeconfig(text, "fuzz", {}, opts);
    (void)kubesandbox::proto::parse_exec_credential(text);
    (void)kubesandbox::proto::parse_rfc3339(text);
    return 0;
}
