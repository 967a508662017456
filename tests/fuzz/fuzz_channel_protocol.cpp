// libFuzzer target: the exec/attach/port-forward channel protocol and the exec status channel.
// Decoders return values or typed errors for any bytes, and what decodes re-encodes the same.
#include "proto/channel_protocol.hpp"
#include "proto/exec_status.hpp"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

namespace proto = kubesandbox::proto;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string_view in(reinterpret_cast<const char*>(data), size);
    try {
        if (auto frame = proto::decode_channel_frame(in)) {
            if (proto::encode_channel_frame(frame->channel, frame->payload) != in) std::abort();
            (void)proto::closed_channel(*frame);
        }
        if (auto port = proto::decode_port_prefix(in)) {
            if (in.size() < 2) std::abort();
        }
        if (auto ports = proto::parse_port_list(in)) {
            for (auto p : *ports)
                if (p == 0) std::abort();
        }
        auto status = proto::decode_exec_status(in);
        if (status && *status && **status < 0) std::abort();
        if (!status && status.error().message.empty()) std::abort();
    } catch (...) {
        std::abort();
    }
    return 0;
}
