// Moving files with the python-runtime (see runtime_files.hpp).
#include "sandbox/runtime_files.hpp"

#include "files/text.hpp"
#include "proto/base64.hpp"
#include "sandbox/runtime_protocol.hpp"

#include <boost/json/parse.hpp>

#include <charconv>

namespace kubesandbox::runtime_protocol {

MultipartFrame multipart_frame(std::string_view filename, std::string_view boundary) {
    MultipartFrame f;
    f.content_type = "multipart/form-data; boundary=" + std::string(boundary);
    f.before.append("--").append(boundary);
    f.before.append("\r\nContent-Disposition: form-data; name=\"file\"; filename=\"")
        .append(filename)
        .append("\"\r\n\r\n");
    f.after.append("\r\n--").append(boundary).append("--\r\n");
    return f;
}

MultipartBody multipart_file(std::string_view filename, std::string_view data, std::string_view boundary) {
    MultipartFrame frame = multipart_frame(filename, boundary);
    MultipartBody m{std::move(frame.content_type), {}};
    m.body.reserve(frame.before.size() + data.size() + frame.after.size());
    m.body.append(frame.before).append(data).append(frame.after);
    return m;
}

std::optional<std::string> runtime_relative_name(std::string_view base, std::string_view path) {
    while (base.size() > 1 && base.back() == '/') base.remove_suffix(1);
    if (base.empty() || base.front() != '/' || path.empty() || path.front() != '/') return std::nullopt;
    std::string_view rel;
    if (base == "/") {
        rel = path.substr(1);
    } else {
        if (path.size() <= base.size() + 1 || path.substr(0, base.size()) != base || path[base.size()] != '/')
            return std::nullopt;
        rel = path.substr(base.size() + 1);
    }
    if (rel.empty() || rel.back() == '/' || !files::valid_utf8(rel)) return std::nullopt;
    std::size_t start = 0;
    while (start <= rel.size()) {
        auto slash = rel.find('/', start);
        auto part = rel.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
        if (part.empty() || part == "." || part == "..") return std::nullopt;
        if (slash == std::string_view::npos) break;
        start = slash + 1;
    }
    for (unsigned char c : rel) {
        if (c < 0x20 || c == 0x7f || c == '%' || c == '"' || c == '\\') return std::nullopt;
    }
    return std::string(rel);
}

std::optional<std::string> runtime_view_segment(std::string_view base, std::string_view path) {
    std::string_view trimmed = base;
    while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.remove_suffix(1);
    std::string_view p = path;
    while (p.size() > 1 && p.back() == '/') p.remove_suffix(1);
    if (!trimmed.empty() && trimmed.front() == '/' && p == trimmed) return std::string(".");
    auto name = runtime_relative_name(base, p);
    if (!name) return std::nullopt;
    return quote_segment(*name);
}

std::optional<std::vector<RuntimeEntry>> parse_listing(std::string_view body) {
    namespace json = boost::json;
    boost::system::error_code ec;
    json::value doc = json::parse(body, ec);
    if (ec || !doc.is_array()) return std::nullopt;
    std::vector<RuntimeEntry> out;
    out.reserve(doc.get_array().size());
    for (const auto& v : doc.get_array()) {
        const json::object* o = v.if_object();
        if (!o) return std::nullopt;
        const json::value* name = o->if_contains("name");
        const json::value* size = o->if_contains("size");
        const json::value* type = o->if_contains("type");
        const json::value* mod_time = o->if_contains("mod_time");
        if (!name || !name->is_string() || !size || !type || !type->is_string()) return std::nullopt;
        RuntimeEntry e;
        e.name = name->get_string();
        if (size->is_int64() && size->get_int64() >= 0) e.size = static_cast<std::uint64_t>(size->get_int64());
        else if (size->is_uint64()) e.size = size->get_uint64();
        else return std::nullopt;
        if (type->get_string() == "directory") e.is_directory = true;
        else if (type->get_string() != "file") return std::nullopt;
        if (mod_time && mod_time->is_number()) e.mod_time = mod_time->to_number<double>();
        else if (mod_time) return std::nullopt;
        out.push_back(std::move(e));
    }
    return out;
}

std::optional<bool> parse_exists(std::string_view body) {
    boost::system::error_code ec;
    boost::json::value doc = boost::json::parse(body, ec);
    const boost::json::object* o = ec ? nullptr : doc.if_object();
    const boost::json::value* exists = o ? o->if_contains("exists") : nullptr;
    if (!exists || !exists->is_bool()) return std::nullopt;
    return exists->get_bool();
}

namespace {

// $1 path, $2 base64 piece, $3 1 for the first piece (checks, then truncate) or 0 (append).
constexpr const char* upload_piece_script = R"SH(p=$1
if [ "$3" = 1 ]; then
  case $p in */*) d=${p%/*}; [ -n "$d" ] || d=/ ;; *) d=. ;; esac
  if [ ! -d "$d" ]; then
    mkdir -p -- "$d" 2>/dev/null || { [ -e "$d" ] && exit 22; exit 20; }
  fi
  [ -d "$p" ] && exit 21
  { true > "$p"; } 2>/dev/null || exit 20
  printf %s "$2" | base64 -d > "$p" || exit 24
else
  printf %s "$2" | base64 -d >> "$p" || exit 24
fi
)SH";

// $1 path, $2 byte limit.
constexpr const char* download_script = R"SH(p=$1
[ -d "$p" ] && exit 21
[ -e "$p" ] || exit 22
[ -r "$p" ] || exit 20
n=$(wc -c < "$p") || exit 20
[ "$n" -gt "$2" ] && exit 23
exec base64 < "$p"
)SH";

// $1 path, $2 piece index, $3 piece size: the file's size on a line, then the piece's bytes in
// base64. A piece cut short by a failed read shows against the size.
constexpr const char* download_piece_script = R"SH(p=$1
[ -d "$p" ] && exit 21
[ -e "$p" ] || exit 22
[ -r "$p" ] || exit 20
[ -f "$p" ] || { echo "not a regular file" >&2; exit 24; }
wc -c < "$p" || exit 20
dd if="$p" bs="$3" skip="$2" count=1 2>/dev/null | base64
)SH";

}  // namespace

std::vector<std::string> upload_piece_argv(std::string_view path, std::string_view piece, bool first) {
    return {"sh", "-c", upload_piece_script, "sh", std::string(path), proto::base64_encode(piece), first ? "1" : "0"};
}

std::vector<std::string> download_argv(std::string_view path, std::size_t max_bytes) {
    return {"sh", "-c", download_script, "sh", std::string(path), std::to_string(max_bytes)};
}

std::vector<std::string> download_piece_argv(std::string_view path, std::uint64_t index) {
    return {"sh",
            "-c",
            download_piece_script,
            "sh",
            std::string(path),
            std::to_string(index),
            std::to_string(download_piece_bytes)};
}

std::optional<DownloadPiece> parse_download_piece(std::string_view stdout_text) {
    const auto line_end = stdout_text.find('\n');
    if (line_end == std::string_view::npos) return std::nullopt;
    std::string_view size_text = stdout_text.substr(0, line_end);
    while (!size_text.empty() && (size_text.front() == ' ' || size_text.front() == '\t')) size_text.remove_prefix(1);
    DownloadPiece piece;
    auto [end, ec] = std::from_chars(size_text.data(), size_text.data() + size_text.size(), piece.file_size);
    if (ec != std::errc() || end != size_text.data() + size_text.size() || size_text.empty()) return std::nullopt;
    auto bytes = proto::base64_decode(stdout_text.substr(line_end + 1));
    if (!bytes) return std::nullopt;
    piece.bytes = std::move(*bytes);
    return piece;
}

}  // namespace kubesandbox::runtime_protocol
