#include "file_commands.hpp"

#include <kubesandbox/file_format.hpp>
#include <kubesandbox/file_ops.hpp>

#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <iostream>

namespace kubesandbox::cli {

namespace json = boost::json;
namespace asio = boost::asio;

namespace {

json::value optional_string(const std::optional<std::string>& s) {
    if (!s) return nullptr;
    return json::value(*s);
}

template <class T>
json::value optional_number(const std::optional<T>& n) {
    if (!n) return nullptr;
    return json::value(*n);
}

json::array file_infos(const std::optional<std::vector<FileInfo>>& infos) {
    json::array out;
    if (infos)
        for (const auto& i : *infos) out.push_back(json::object{{"path", i.path}, {"is_dir", i.is_dir}});
    return out;
}

void print(const std::string& text) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    if (text.empty() || text.back() != '\n') std::fputc('\n', stdout);
}

// Prints the result; returns the exit code.
int finish(const std::optional<std::string>& error, const json::object& document, bool as_json,
           const std::string& human) {
    if (as_json) {
        std::cout << json::serialize(document) << "\n";
    } else if (error) {
        std::cerr << *error << "\n";
    } else {
        print(human);
    }
    return error ? 1 : 0;
}

int report(const Error& e) {
    std::cerr << "kubesandbox: error: " << e.describe() << "\n";
    return 1;
}

std::vector<std::string> paths_of(const std::optional<std::vector<FileInfo>>& infos) {
    std::vector<std::string> out;
    if (infos)
        for (const auto& i : *infos) out.push_back(i.path);
    return out;
}

}  // namespace

std::optional<std::string> read_all(int fd) {
    // Straight into the string in large reads: a stream iterator goes byte by byte, which made
    // `cp` of 200 MB spend longer reading the file than sending it.
    struct stat st {};
    std::string data;
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0)
        data.reserve(static_cast<std::size_t>(st.st_size));
    constexpr std::size_t chunk = 1 << 20;
    for (;;) {
        const std::size_t at = data.size();
        data.resize(at + chunk);
        const ssize_t n = ::read(fd, data.data() + at, chunk);
        if (n < 0 && errno == EINTR) {
            data.resize(at);
            continue;
        }
        if (n < 0) return std::nullopt;
        data.resize(at + static_cast<std::size_t>(n));
        if (n == 0) return data;
    }
}

std::optional<std::string> read_local_file(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return std::nullopt;
    auto data = read_all(fd);
    ::close(fd);
    return data;
}

bool is_file_command(std::string_view name) {
    for (const char* c : {"ls", "read", "write", "edit", "glob", "grep", "rm"})
        if (name == c) return true;
    return false;
}

std::optional<std::string> prepare_file_command(FileCommand& c) {
    auto want = [&](std::size_t n, const char* shape) -> std::optional<std::string> {
        if (c.args.size() != n) return c.name + " needs " + shape;
        return std::nullopt;
    };
    if (c.name == "edit") {
        if (c.old_file || c.new_file) {
            if (!c.old_file || !c.new_file) return std::string("edit needs both --old-file and --new-file");
            if (c.args.size() != 1) return std::string("edit with --old-file/--new-file needs ID PATH only");
            auto old_s = read_local_file(*c.old_file);
            auto new_s = read_local_file(*c.new_file);
            if (!old_s) return "cannot read " + *c.old_file;
            if (!new_s) return "cannot read " + *c.new_file;
            c.args.push_back(std::move(*old_s));
            c.args.push_back(std::move(*new_s));
        }
        return want(3, "ID PATH OLD NEW (or ID PATH --old-file F --new-file F)");
    }
    if (c.name == "glob" || c.name == "grep") return want(1, "ID PATTERN");
    return want(1, "ID PATH");
}

asio::awaitable<int> run_file_command(Sandbox& sandbox, const FileCommand& c) {
    FileOps files(sandbox);
    const std::string& first = c.args.at(0);
    if (c.name == "ls") {
        auto r = co_await files.ls(first);
        if (!r) co_return report(r.error());
        json::object doc{{"error", optional_string(r->error)},
                         {"entries", r->entries ? json::value(file_infos(r->entries)) : nullptr}};
        co_return finish(r->error, doc, c.json, format_path_list(paths_of(r->entries)));
    }
    if (c.name == "read") {
        auto r = co_await files.read(first, c.offset.value_or(0), c.limit.value_or(2000));
        if (!r) co_return report(r.error());
        json::value data = nullptr;
        std::string human;
        if (r->file_data) {
            data = json::object{{"content", r->file_data->content}, {"encoding", r->file_data->encoding}};
            if (r->file_data->encoding != "utf-8") human = r->file_data->content;  // base64, as the model would get it
            else if (r->no_lines_requested || !r->start_line) human = r->file_data->content;
            else human = format_line_numbers(r->file_data->content, *r->start_line);
        }
        json::object doc{{"error", optional_string(r->error)},
                         {"file_data", data},
                         {"total_lines", optional_number(r->total_lines)},
                         {"start_line", optional_number(r->start_line)},
                         {"end_line", optional_number(r->end_line)},
                         {"next_offset", optional_number(r->next_offset)},
                         {"no_lines_requested", r->no_lines_requested}};
        co_return finish(r->error, doc, c.json, human);
    }
    if (c.name == "write") {
        auto r = co_await files.write(first, c.input);
        if (!r) co_return report(r.error());
        json::object doc{{"error", optional_string(r->error)}, {"path", optional_string(r->path)}};
        co_return finish(r->error, doc, c.json, "Updated file " + first);
    }
    if (c.name == "edit") {
        auto r = co_await files.edit(first, c.args.at(1), c.args.at(2), c.replace_all);
        if (!r) co_return report(r.error());
        json::object doc{{"error", optional_string(r->error)},
                         {"path", optional_string(r->path)},
                         {"occurrences", optional_number(r->occurrences)}};
        co_return finish(r->error, doc, c.json,
                         "Successfully replaced " + std::to_string(r->occurrences.value_or(0)) +
                             " instance(s) of the string in '" + first + "'");
    }
    if (c.name == "rm") {
        auto r = co_await files.remove(first);
        if (!r) co_return report(r.error());
        json::object doc{{"error", optional_string(r->error)}, {"path", optional_string(r->path)}};
        co_return finish(r->error, doc, c.json, "Deleted " + first);
    }
    if (c.name == "glob") {
        auto r = co_await files.glob(first, c.path.value_or(""));
        if (!r) co_return report(r.error());
        json::object doc{{"error", optional_string(r->error)},
                         {"matches", r->matches ? json::value(file_infos(r->matches)) : nullptr},
                         {"truncated", r->truncated}};
        co_return finish(r->error, doc, c.json, format_path_list(paths_of(r->matches)));
    }
    // grep
    std::optional<std::size_t> max_count;
    if (c.max_count) max_count = static_cast<std::size_t>(*c.max_count);
    auto r = co_await files.grep(first, c.path.value_or(""), c.glob.value_or(""), max_count);
    if (!r) co_return report(r.error());
    json::array matches;
    if (r->matches)
        for (const auto& m : *r->matches)
            matches.push_back(json::object{{"path", m.path}, {"line", m.line}, {"text", m.text}});
    json::object doc{{"error", optional_string(r->error)},
                     {"matches", r->matches ? json::value(std::move(matches)) : nullptr},
                     {"truncated", r->truncated}};
    co_return finish(r->error, doc, c.json,
                     r->matches ? format_grep_matches(*r->matches, GrepOutputMode::content) : std::string());
}

}  // namespace kubesandbox::cli
