// Incremental decoder of watch response bodies: newline-delimited JSON events, fed in arbitrary
// pieces (chunk boundaries fall anywhere, even inside a UTF-8 sequence). Sans-IO.
#pragma once

#include <kubesandbox/error.hpp>
#include <kubesandbox/kube_types.hpp>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace kubesandbox::proto {

class WatchDecoder {
public:
    explicit WatchDecoder(std::size_t max_event_bytes = 64 * 1024 * 1024);
    ~WatchDecoder();
    WatchDecoder(WatchDecoder&&) noexcept;
    WatchDecoder& operator=(WatchDecoder&&) noexcept;

    void feed(std::string_view bytes);  // any split, including mid-UTF-8 and mid-line
    // Next complete event, nullopt if more bytes are needed. errc::invalid_response on garbage
    // JSON, an unknown "type", a missing object, or an event larger than max_event_bytes; the
    // error is sticky (the stream cannot be resynchronised).
    Result<std::optional<WatchEvent>> next();
    // Bytes received but not yet returned as events (0 at a clean event boundary).
    std::size_t buffered() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// Decodes one event object ({"type":..., "object":{...}}).
Result<WatchEvent> watch_event_from_json(boost::json::value value);

}  // namespace kubesandbox::proto
