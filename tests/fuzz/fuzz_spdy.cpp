// libFuzzer target: the local cluster's SPDY/3 codec. The input is fed to a frame decoder in
// pieces whose sizes come from the input itself; every outcome is a frame, "need more bytes" or
// a typed error, nothing throws, and a decoded header block re-encodes to the same pairs.
#include "local/spdy.hpp"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

namespace spdy = kubesandbox::local::spdy;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    const std::size_t step = 1 + data[0] % 64;
    std::string_view in(reinterpret_cast<const char*>(data + 1), size - 1);
    try {
        spdy::Decoder dec(1 << 16);
        for (std::size_t at = 0; at < in.size(); at += step) {
            dec.feed(in.substr(at, step));
            for (;;) {
                auto f = dec.next();
                if (!f) {
                    if (f.error().message.empty()) std::abort();
                    return 0;  // a decoder error ends the connection
                }
                if (!*f) break;
            }
        }
        // The raw input as an uncompressed header block: valid blocks round-trip exactly.
        if (auto block = spdy::decode_header_block(in)) {
            if (spdy::encode_header_block(*block) != in) std::abort();
        }
        spdy::HeaderInflater inflater;
        (void)inflater.inflate(in);
    } catch (...) {
        std::abort();
    }
    return 0;
}
