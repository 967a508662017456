#include "local/runtime/multipart_reader.hpp"

#include <cctype>

namespace kubesandbox::runtime {

namespace {

std::string lower(std::string_view s) {
    std::string out;
    for (char c : s) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

}  // namespace

std::optional<std::string> multipart_boundary(std::string_view content_type) {
    auto semi = content_type.find(';');
    std::string_view type = content_type.substr(0, semi);
    while (!type.empty() && type.back() == ' ') type.remove_suffix(1);
    if (lower(type) != "multipart/form-data" || semi == std::string_view::npos) return std::nullopt;
    std::string_view params = content_type.substr(semi + 1);
    while (!params.empty()) {
        auto next = params.find(';');
        std::string_view param = params.substr(0, next);
        params = next == std::string_view::npos ? std::string_view{} : params.substr(next + 1);
        while (!param.empty() && param.front() == ' ') param.remove_prefix(1);
        auto eq = param.find('=');
        if (eq == std::string_view::npos) continue;
        if (lower(param.substr(0, eq)) != "boundary") continue;
        std::string_view value = param.substr(eq + 1);
        if (value.size() >= 2 && value.front() == '"' && value.back() == '"') value = value.substr(1, value.size() - 2);
        if (value.empty() || value.size() > 200) return std::nullopt;
        return std::string(value);
    }
    return std::nullopt;
}

namespace {

// A parameter of a Content-Disposition header: token or quoted-string (backslash escapes).
std::optional<std::string> disposition_param(std::string_view header, std::string_view name) {
    std::size_t pos = 0;
    while (pos < header.size()) {
        auto semi = header.find(';', pos);
        if (semi == std::string_view::npos) return std::nullopt;
        pos = semi + 1;
        while (pos < header.size() && header[pos] == ' ') ++pos;
        auto eq = header.find('=', pos);
        if (eq == std::string_view::npos) return std::nullopt;
        std::string key = lower(header.substr(pos, eq - pos));
        std::size_t v = eq + 1;
        std::string value;
        if (v < header.size() && header[v] == '"') {
            ++v;
            while (v < header.size() && header[v] != '"') {
                if (header[v] == '\\' && v + 1 < header.size()) ++v;
                value += header[v++];
            }
            if (v >= header.size()) return std::nullopt;
            ++v;
        } else {
            while (v < header.size() && header[v] != ';') value += header[v++];
        }
        if (key == name) return value;
        pos = v;
    }
    return std::nullopt;
}

// A part's header lines; nullopt without a Content-Disposition that names the part.
std::optional<FormPartHead> parse_part_head(std::string_view head) {
    FormPartHead part;
    bool has_disposition = false;
    std::size_t line_start = 0;
    while (line_start <= head.size()) {
        auto line_end = head.find("\r\n", line_start);
        std::string_view line = head.substr(
            line_start, line_end == std::string_view::npos ? std::string_view::npos : line_end - line_start);
        auto colon = line.find(':');
        if (colon != std::string_view::npos && lower(line.substr(0, colon)) == "content-disposition") {
            std::string_view value = line.substr(colon + 1);
            has_disposition = true;
            auto name = disposition_param(value, "name");
            if (!name) return std::nullopt;
            part.name = *name;
            part.filename = disposition_param(value, "filename");
        }
        if (line_end == std::string_view::npos) break;
        line_start = line_end + 2;
    }
    if (!has_disposition) return std::nullopt;
    return part;
}

}  // namespace

MultipartReader::MultipartReader(std::string_view boundary)
    : delimiter_("--" + std::string(boundary)), next_delimiter_("\r\n" + delimiter_) {}

MultipartReader::State MultipartReader::feed(std::string_view bytes, Events& events) {
    if (state_ != State::reading) return state_;
    pending_.append(bytes);
    for (;;) {
        switch (phase_) {
            case Phase::preamble: {
                auto at = pending_.find(delimiter_);
                if (at == std::string::npos) {
                    // Anything before the first delimiter is ignored; keep what may start one.
                    if (pending_.size() >= delimiter_.size())
                        pending_.erase(0, pending_.size() - delimiter_.size() + 1);
                    return state_;
                }
                pending_.erase(0, at + delimiter_.size());
                phase_ = Phase::after_delimiter;
                break;
            }
            case Phase::after_delimiter: {
                if (pending_.size() < 2) return state_;
                if (pending_.compare(0, 2, "--") == 0) {
                    pending_.clear();
                    return state_ = State::done;
                }
                if (pending_.compare(0, 2, "\r\n") != 0) return state_ = State::malformed;
                pending_.erase(0, 2);
                phase_ = Phase::head;
                break;
            }
            case Phase::head: {
                // Searched from where the last search stopped, so a head sent a byte at a time
                // costs its length, not its length squared.
                auto end = pending_.find("\r\n\r\n", head_scanned_);
                if (end == std::string::npos) {
                    if (pending_.size() > max_head) return state_ = State::malformed;
                    head_scanned_ = pending_.size() < 3 ? 0 : pending_.size() - 3;
                    return state_;
                }
                head_scanned_ = 0;
                auto head = parse_part_head(std::string_view(pending_).substr(0, end));
                if (!head) return state_ = State::malformed;
                pending_.erase(0, end + 4);
                events.on_part(*head);
                phase_ = Phase::data;
                break;
            }
            case Phase::data: {
                auto at = pending_.find(next_delimiter_);
                if (at == std::string::npos) {
                    // All but what may start the delimiter is the part's.
                    std::size_t keep = next_delimiter_.size() - 1;
                    if (pending_.size() > keep) {
                        events.on_data(std::string_view(pending_).substr(0, pending_.size() - keep));
                        pending_.erase(0, pending_.size() - keep);
                    }
                    return state_;
                }
                if (at > 0) events.on_data(std::string_view(pending_).substr(0, at));
                pending_.erase(0, at + next_delimiter_.size());
                phase_ = Phase::after_delimiter;
                break;
            }
        }
    }
}

MultipartReader::State MultipartReader::finish() {
    if (state_ == State::reading) state_ = State::malformed;
    return state_;
}

std::optional<std::vector<FormPart>> parse_multipart(std::string_view body, std::string_view boundary) {
    struct Collect final : MultipartReader::Events {
        std::vector<FormPart> parts;
        void on_part(const FormPartHead& head) override { parts.push_back(FormPart{head.name, head.filename, {}}); }
        void on_data(std::string_view data) override { parts.back().data.append(data); }
    } collect;
    MultipartReader reader(boundary);
    reader.feed(body, collect);
    if (reader.finish() != MultipartReader::State::done) return std::nullopt;
    return std::move(collect.parts);
}

}  // namespace kubesandbox::runtime
