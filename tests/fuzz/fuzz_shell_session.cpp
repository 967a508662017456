// libFuzzer target: the shell session's trailer scanner and greeting parser. Cutting a stream into
// pieces anywhere gives the same result as feeding it whole; output before a well-formed trailer
// comes back byte for byte; the greeting parser accepts or refuses any bytes without throwing.
#include "sandbox/shell_session_core.hpp"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

using kubesandbox::sandbox::TrailerScanner;

namespace {

// A short marker, so that the fuzzer reaches near-misses and split markers easily.
const std::string marker = "k7q";

struct Fed {
    std::string out;
    bool truncated{};
    bool ok{true};
    bool done{};
    bool stray{};
    int status{-1};
    bool operator==(const Fed&) const = default;
};

Fed feed(std::string_view stream, TrailerScanner::Kind kind, const std::vector<std::size_t>& cuts, std::size_t cap) {
    TrailerScanner scanner(marker, kind);
    Fed r;
    std::size_t from = 0;
    for (std::size_t cut : cuts) {
        if (cut < from || cut > stream.size()) continue;
        r.ok = scanner.feed(stream.substr(from, cut - from), r.out, cap, r.truncated) && r.ok;
        from = cut;
    }
    r.ok = scanner.feed(stream.substr(from), r.out, cap, r.truncated) && r.ok;
    r.done = scanner.done();
    r.stray = scanner.stray();
    r.status = scanner.status();
    return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 2) return 0;
    const std::size_t cap = data[0] % 64 + 1;
    const std::size_t step = data[1] % 7 + 1;
    std::string_view stream(reinterpret_cast<const char*>(data + 2), size - 2);
    std::vector<std::size_t> cuts;
    for (std::size_t at = step; at < stream.size(); at += step + (at % 3)) cuts.push_back(at);
    (void)kubesandbox::sandbox::parse_driver_hello(stream);
    for (auto kind : {TrailerScanner::Kind::stdout_with_status, TrailerScanner::Kind::stderr_bare}) {
        const Fed whole = feed(stream, kind, {}, SIZE_MAX);
        const Fed cut = feed(stream, kind, cuts, SIZE_MAX);
        // After a malformed trailer the session is dropped: only the verdict must agree.
        if (cut.ok != whole.ok || (whole.ok && !(cut == whole))) std::abort();
        // A cap keeps a prefix of the same output.
        const Fed capped = feed(stream, kind, cuts, cap);
        if (whole.ok && (capped.out != whole.out.substr(0, cap) || capped.done != whole.done)) std::abort();
        // Output without the marker, then a trailer: the output comes back whole.
        if (stream.find(marker) == std::string_view::npos) {
            std::string framed(stream);
            framed += kind == TrailerScanner::Kind::stderr_bare ? marker + "\n" : marker + " 42\n";
            const Fed f = feed(framed, kind, cuts, SIZE_MAX);
            if (!f.ok || !f.done || f.out != stream || f.stray) std::abort();
            if (kind == TrailerScanner::Kind::stdout_with_status && f.status != 42) std::abort();
        }
    }
    return 0;
}
