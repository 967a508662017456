// libFuzzer target: an exec credential plugin's stdout (ExecCredential JSON) and RFC 3339 times.
// Any bytes give a credential or a typed error; no time overflows the clock.
#include "proto/exec_credential.hpp"

#include <cstdint>
#include <cstdlib>
#include <string_view>

namespace proto = kubesandbox::proto;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string_view in(reinterpret_cast<const char*>(data), size);
    try {
        auto cred = proto::parse_exec_credential(in);
        if (!cred && cred.error().message.empty()) std::abort();
        auto pinned = proto::parse_exec_credential(in, "client.authentication.k8s.io/v1");
        if (pinned && !cred) std::abort();  // a version check only ever refuses more
        (void)proto::parse_rfc3339(in);
    } catch (...) {
        std::abort();
    }
    return 0;
}
