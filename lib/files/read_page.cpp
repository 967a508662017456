#include "files/read_page.hpp"

#include "files/scripts.hpp"
#include "files/text.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>

namespace kubesandbox::files {

namespace {

constexpr std::size_t page_cap = file_limits::max_output_bytes + 1;  // bytes of a large file's page sent

bool ends_with_icase(std::string_view s, std::string_view suffix) {
    if (s.size() < suffix.size()) return false;
    return std::equal(suffix.begin(), suffix.end(), s.end() - static_cast<std::ptrdiff_t>(suffix.size()),
                      [](char expected, char c) { return std::tolower(static_cast<unsigned char>(c)) == expected; });
}

std::optional<long long> parse_number(std::string_view s) {
    long long v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || p != s.data() + s.size() || v < 0) return std::nullopt;
    return v;
}

std::string unexpected(std::string_view output) {
    std::string detail(output.substr(0, 200));
    return "unexpected server response: " + (detail.empty() ? std::string("(empty)") : replace_invalid_utf8(detail));
}

ReadResult error_result(std::string text) {
    ReadResult r;
    r.error = std::move(text);
    return r;
}

ReadResult content_result(std::string content, std::string encoding) {
    ReadResult r;
    r.file_data = FileData{std::move(content), std::move(encoding)};
    return r;
}

}  // namespace

FileKind file_kind(std::string_view path) {
    static constexpr std::array<std::pair<const char*, FileKind>, 26> table{
        {{".png", FileKind::image},    {".jpeg", FileKind::image},   {".jpg", FileKind::image},
         {".webp", FileKind::image},   {".gif", FileKind::image},    {".heic", FileKind::image},
         {".heif", FileKind::image},   {".mp4", FileKind::video},    {".mpeg", FileKind::video},
         {".mov", FileKind::video},    {".avi", FileKind::video},    {".flv", FileKind::video},
         {".mpg", FileKind::video},    {".webm", FileKind::video},   {".wmv", FileKind::video},
         {".3gpp", FileKind::video},   {".mkv", FileKind::video},    {".wav", FileKind::audio},
         {".mp3", FileKind::audio},    {".aiff", FileKind::audio},   {".aac", FileKind::audio},
         {".ogg", FileKind::audio},    {".flac", FileKind::audio},   {".pdf", FileKind::document},
         {".ppt", FileKind::document}, {".pptx", FileKind::document}}};
    for (const auto& [suffix, kind] : table)
        if (ends_with_icase(path, suffix)) return kind;
    return FileKind::text;
}

std::string read_command(std::string_view path, FileKind kind, long long offset, long long limit, bool large) {
    // One line past the page tells "more lines follow" from "the page ends at the end of file".
    return "set -- " + shell_quote(path) + (kind == FileKind::text ? " text " : " binary ") +
           std::to_string(offset + 1) + " " + std::to_string(std::min(limit, 1000000000LL) + 1) +
           (large ? " large\n" : "\n") + std::string(read_script);
}

ParsedRead parse_read_output(std::string_view out, bool output_truncated) {
    ParsedRead parsed;
    auto fail = [&] {
        parsed.error = unexpected(out);
        return parsed;
    };
    if (out.substr(0, 2) == "W\n") {
        // The first bytes of the file, one more than a whole read: no more means the whole file.
        std::string_view rest = out.substr(2);
        if (output_truncated) return fail();
        if (rest.size() > file_limits::max_output_bytes) {
            parsed.large = true;
            return parsed;
        }
        parsed.source.size = rest.size();
        parsed.source.whole = true;
        parsed.source.body = std::string(rest);
        return parsed;
    }
    std::size_t nl = out.find('\n');
    if (nl == std::string_view::npos || nl < 2 || out[1] != ' ') return fail();
    std::string_view first = out.substr(2, nl - 2);
    std::string_view rest = out.substr(nl + 1);
    char tag = out[0];
    if (tag == 'E') {
        parsed.error = std::string(first);
        return parsed;
    }
    auto size = parse_number(first);
    if (!size) return fail();
    parsed.source.size = static_cast<std::size_t>(*size);
    if (tag == 'B') {
        parsed.too_large_binary = true;
        return parsed;
    }
    if (tag == 'W') {
        if (rest.size() != parsed.source.size) return fail();  // changed while read, or cut
        parsed.source.whole = true;
        parsed.source.body = std::string(rest);
        return parsed;
    }
    if (tag != 'L') return fail();
    std::size_t head = std::min(parsed.source.size, file_limits::text_probe_bytes);
    if (rest.size() < head) return fail();
    parsed.source.head = std::string(rest.substr(0, head));
    rest.remove_prefix(head);
    nl = rest.find('\n');
    if (nl == std::string_view::npos || rest.substr(0, 2) != "N ") return fail();
    std::string_view count = rest.substr(2, nl - 2);
    if (count != "-") {
        std::size_t space = count.find(' ');
        if (space == std::string_view::npos) return fail();
        auto lines = parse_number(count.substr(0, space));
        auto last_has_newline = parse_number(count.substr(space + 1));
        if (!lines || !last_has_newline) return fail();
        // wc -l counts newlines; a last line without one is a line too.
        parsed.source.line_count = *lines + (*last_has_newline == 0 ? 1 : 0);
    }
    rest.remove_prefix(nl + 1);
    parsed.source.body = std::string(rest);
    parsed.source.body_complete = rest.size() < page_cap && !output_truncated;
    return parsed;
}

ReadResult read_page(const ReadSource& source, FileKind kind, long long offset, long long limit) {
    offset = std::clamp(offset, 0LL, max_read_offset);
    limit = std::max(limit, 0LL);
    if (source.size == 0) return content_result(file_limits::empty_content_warning, "utf-8");
    const std::string binary_too_large =
        "Binary file exceeds maximum preview size of " + std::to_string(file_limits::max_output_bytes) + " bytes";
    if (kind != FileKind::text) {
        if (!source.whole) return error_result(binary_too_large);
        return content_result(base64_encode(source.body), "base64");
    }
    std::string_view head = source.whole ? std::string_view(source.body).substr(0, file_limits::text_probe_bytes)
                                         : std::string_view(source.head);
    // A character cut by the probe's end is fine; one cut by the end of the file is not.
    if (!valid_utf8(head, head.size() < source.size)) {
        // Not text: whole as base64 while it fits the preview (the reference has no cap here).
        if (!source.whole) return error_result(binary_too_large);
        return content_result(base64_encode(source.body), "base64");
    }
    if (limit == 0) {
        ReadResult r = content_result("", "utf-8");
        r.no_lines_requested = true;
        return r;
    }

    // Invalid bytes past the probe become U+FFFD (the reference fails there with a traceback).
    std::string text = replace_invalid_utf8(source.whole ? universal_newlines(source.body) : source.body);
    auto lines = split_lines(text);
    const std::string_view message = file_limits::read_truncation_message;
    const std::size_t budget = file_limits::max_output_bytes - message.size();

    long long line_count = source.whole ? 0 : offset;
    long long returned = 0;
    bool truncated = false, stopped = false;
    std::string content;
    for (auto line : lines) {
        ++line_count;
        if (line_count <= offset) continue;
        if (returned >= limit) {
            stopped = true;
            break;
        }
        std::size_t piece = line.size() + (returned == 0 ? 0 : 1);
        if (content.size() + piece > budget) {
            truncated = true;
            std::size_t room = budget - content.size();
            std::string joined = (returned == 0 ? std::string() : std::string("\n")) + std::string(line);
            content.append(joined, 0, utf8_floor(joined, room));
            break;
        }
        if (returned > 0) content.push_back('\n');
        content.append(line);
        ++returned;
    }
    bool at_eof = !stopped && !truncated && (source.whole || source.body_complete);
    if (!source.whole && !source.body_complete && !stopped && !truncated) truncated = true;  // page cut short

    std::optional<long long> total;
    if (at_eof) total = line_count;
    else if (source.size <= file_limits::full_count_bytes)
        total = source.whole ? static_cast<long long>(lines.size()) : source.line_count;

    if (returned == 0 && !truncated) {
        long long n = source.whole ? static_cast<long long>(lines.size()) : source.line_count.value_or(line_count);
        return error_result("Line offset " + std::to_string(offset) + " exceeds file length (" + std::to_string(n) +
                            " lines)");
    }
    if (truncated) {
        content.append(message);
        if (returned == 0) returned = 1;
    }
    ReadResult r = content_result(std::move(content), "utf-8");
    r.total_lines = total;
    r.start_line = offset + 1;
    r.end_line = offset + returned;
    if (!total || *r.end_line < *total) r.next_offset = r.end_line;
    return r;
}

}  // namespace kubesandbox::files
