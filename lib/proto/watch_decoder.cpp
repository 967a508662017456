#include "proto/watch_decoder.hpp"

#include <boost/json/stream_parser.hpp>

namespace kubesandbox::proto {

namespace json = boost::json;

Result<WatchEvent> watch_event_from_json(json::value value) {
    if (!value.is_object()) return fail(errc::invalid_response, "watch event is not a JSON object");
    auto& obj = value.get_object();
    auto type_it = obj.find("type");
    if (type_it == obj.end() || !type_it->value().is_string())
        return fail(errc::invalid_response, "watch event has no \"type\"");
    std::string_view type = type_it->value().get_string();
    WatchEvent ev{};
    if (type == "ADDED") ev.type = WatchEvent::Type::added;
    else if (type == "MODIFIED") ev.type = WatchEvent::Type::modified;
    else if (type == "DELETED") ev.type = WatchEvent::Type::deleted;
    else if (type == "BOOKMARK") ev.type = WatchEvent::Type::bookmark;
    else if (type == "ERROR") ev.type = WatchEvent::Type::error;
    else return fail(errc::invalid_response, "unknown watch event type \"" + std::string(type.substr(0, 64)) + "\"");
    auto obj_it = obj.find("object");
    if (obj_it == obj.end() || !obj_it->value().is_object())
        return fail(errc::invalid_response, "watch event " + std::string(type) + " has no object");
    ev.object = std::move(obj_it->value().get_object());
    return ev;
}

struct WatchDecoder::Impl {
    explicit Impl(std::size_t max) : max_event_bytes(max), parser({}, json::parse_options{.max_depth = 512}) {}

    std::size_t max_event_bytes;
    json::stream_parser parser;
    std::string buffer;
    std::size_t pos = 0;       // first unconsumed byte of buffer
    std::size_t in_value = 0;  // bytes already handed to the parser for the current event
    std::optional<Error> failed;
};

WatchDecoder::WatchDecoder(std::size_t max_event_bytes) : impl_(std::make_unique<Impl>(max_event_bytes)) {}
WatchDecoder::~WatchDecoder() = default;
WatchDecoder::WatchDecoder(WatchDecoder&&) noexcept = default;
WatchDecoder& WatchDecoder::operator=(WatchDecoder&&) noexcept = default;

void WatchDecoder::feed(std::string_view bytes) {
    auto& s = *impl_;
    if (s.failed) return;
    // Compact before growing so a long-lived stream does not keep consumed bytes.
    if (s.pos > 0 && s.pos * 2 >= s.buffer.size()) {
        s.buffer.erase(0, s.pos);
        s.pos = 0;
    }
    s.buffer.append(bytes);
}

Result<std::optional<WatchEvent>> WatchDecoder::next() {
    auto& s = *impl_;
    if (s.failed) return fail(*s.failed);
    auto stop = [&](Error e) -> Result<std::optional<WatchEvent>> {
        s.failed = e;
        return fail(std::move(e));
    };
    while (true) {
        if (s.in_value == 0) {
            // Between events: skip blank lines, \r\n and stray whitespace.
            while (s.pos < s.buffer.size()) {
                char c = s.buffer[s.pos];
                if (c != '\n' && c != '\r' && c != ' ' && c != '\t') break;
                ++s.pos;
            }
        }
        if (s.pos >= s.buffer.size()) {
            s.buffer.clear();
            s.pos = 0;
            return std::optional<WatchEvent>{};
        }
        // Never hand the parser more than the event budget allows.
        std::size_t avail = s.buffer.size() - s.pos;
        std::size_t budget = s.max_event_bytes - std::min(s.in_value, s.max_event_bytes);
        std::size_t n = budget < avail ? budget + 1 : avail;
        boost::system::error_code ec;
        std::size_t used = s.parser.write_some(s.buffer.data() + s.pos, n, ec);
        s.pos += used;
        s.in_value += used;
        if (ec) return stop(make_error(errc::invalid_response, "malformed watch event JSON: " + ec.message()));
        if (!s.parser.done()) {
            if (used == 0) return stop(make_error(errc::invalid_response, "watch decoder made no progress"));
            if (s.in_value > s.max_event_bytes)
                return stop(make_error(errc::invalid_response,
                                       "watch event larger than " + std::to_string(s.max_event_bytes) + " bytes"));
            continue;  // consumed everything available; the loop ends at the empty-buffer check
        }
        json::value value = s.parser.release();
        s.parser.reset();
        s.in_value = 0;
        if (s.pos > 0 && s.pos * 2 >= s.buffer.size()) {
            s.buffer.erase(0, s.pos);
            s.pos = 0;
        }
        auto ev = watch_event_from_json(std::move(value));
        if (!ev) return stop(std::move(ev.error()));
        return std::optional<WatchEvent>{std::move(*ev)};
    }
}

std::size_t WatchDecoder::buffered() const { return impl_->buffer.size() - impl_->pos + impl_->in_value; }

}  // namespace kubesandbox::proto
