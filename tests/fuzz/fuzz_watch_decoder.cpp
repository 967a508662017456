// libFuzzer target: the watch body decoder. The first byte picks a chunk size; feeding the rest
// in such chunks must give exactly what feeding it whole gives (same events, same failure).
#include "proto/watch_decoder.hpp"

#include <boost/json/serialize.hpp>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace {

struct Outcome {
    std::vector<std::string> events;
    bool failed = false;
};

void drain(kubesandbox::proto::WatchDecoder& d, Outcome& out) {
    while (!out.failed) {
        auto ev = d.next();
        if (!ev) {
            if (!ev.error().is(kubesandbox::errc::invalid_response)) std::abort();
            out.failed = true;
            return;
        }
        if (!*ev) return;
        out.events.push_back(std::to_string(static_cast<int>((*ev)->type)) + boost::json::serialize((*ev)->object));
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    std::size_t chunk = data[0] % 17 + 1;
    std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);

    Outcome whole;
    {
        kubesandbox::proto::WatchDecoder d(1 << 20);
        d.feed(body);
        drain(d, whole);
    }
    Outcome pieces;
    {
        kubesandbox::proto::WatchDecoder d(1 << 20);
        for (std::size_t i = 0; i < body.size() && !pieces.failed; i += chunk) {
            d.feed(body.substr(i, chunk));
            drain(d, pieces);
        }
        if (!pieces.failed && d.buffered() > body.size()) std::abort();
    }
    if (whole.failed != pieces.failed || whole.events != pieces.events) std::abort();
    return 0;
}
