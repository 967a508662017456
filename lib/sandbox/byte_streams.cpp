// Sandbox::upload_from, download_to and execute into a sink as every sandbox can do them, through
// upload_files, download_files and execute; and a source held to its size.
#include "sandbox/byte_streams.hpp"

#include <algorithm>
#include <optional>

namespace kubesandbox {

namespace asio = boost::asio;

namespace sandbox {

ByteSource exactly(ByteSource source, std::uint64_t size) {
    struct State {
        ByteSource source;
        std::uint64_t size;
        std::uint64_t given = 0;
    };
    auto state = std::make_shared<State>(State{std::move(source), size});
    return [state]() -> asio::awaitable<Result<std::string_view>> {
        auto piece = co_await state->source();
        if (!piece) co_return piece;
        if (piece->size() > state->size - state->given)
            co_return fail(errc::invalid_argument,
                           "the source gave more than the " + std::to_string(state->size) + " bytes announced");
        if (piece->empty() && state->given < state->size)
            co_return fail(errc::invalid_argument, "the source ended after " + std::to_string(state->given) + " of " +
                                                       std::to_string(state->size) + " bytes announced");
        state->given += piece->size();
        co_return piece;
    };
}

ByteSource regrouped(ByteSource source, std::size_t piece_bytes) {
    struct State {
        ByteSource source;
        std::size_t piece_bytes;
        std::string piece{};
        std::string_view pending{};  // the rest of the source's last piece
        bool ended = false;
        std::optional<Error> failed{};  // given again to any later call
    };
    auto state = std::make_shared<State>(State{std::move(source), std::max<std::size_t>(piece_bytes, 1)});
    return [state]() -> asio::awaitable<Result<std::string_view>> {
        State& s = *state;
        if (s.failed) co_return fail(*s.failed);
        s.piece.clear();
        while (s.piece.size() < s.piece_bytes && !s.ended) {
            if (s.pending.empty()) {
                auto next = co_await s.source();
                if (!next) {
                    s.failed = next.error();
                    co_return fail(next.error());
                }
                if (next->empty()) {
                    s.ended = true;
                    break;
                }
                s.pending = *next;
            }
            const std::size_t take = std::min(s.pending.size(), s.piece_bytes - s.piece.size());
            s.piece.append(s.pending.substr(0, take));
            s.pending.remove_prefix(take);
        }
        co_return std::string_view(s.piece);
    };
}

ByteSource framed(std::string before, ByteSource source, std::string after) {
    struct State {
        std::string before, after;
        ByteSource source;
        int stage = 0;                  // 0: before, 1: the source, 2: after, 3: ended
        std::optional<Error> failed{};  // given again to any later call
    };
    auto state = std::make_shared<State>(State{std::move(before), std::move(after), std::move(source)});
    return [state]() -> asio::awaitable<Result<std::string_view>> {
        State& s = *state;
        if (s.failed) co_return fail(*s.failed);
        if (s.stage == 0) {
            s.stage = 1;
            if (!s.before.empty()) co_return std::string_view(s.before);
        }
        if (s.stage == 1) {
            auto piece = co_await s.source();
            if (!piece) s.failed = piece.error();
            if (!piece || !piece->empty()) co_return piece;
            s.stage = 2;
        }
        if (s.stage == 2) {
            s.stage = 3;
            if (!s.after.empty()) co_return std::string_view(s.after);
        }
        co_return std::string_view{};
    };
}

asio::awaitable<Result<std::string>> collect(ByteSource source, std::uint64_t size) {
    if (size > std::string().max_size()) co_return fail(errc::invalid_argument, "file too large to hold in memory");
    ByteSource held = exactly(std::move(source), size);
    std::string all;
    all.reserve(static_cast<std::size_t>(size));
    for (;;) {
        auto piece = co_await held();
        if (!piece) co_return fail(piece.error());
        if (piece->empty()) co_return all;
        all.append(*piece);
    }
}

}  // namespace sandbox

asio::awaitable<Result<FileUploadResponse>> Sandbox::upload_from(std::string path, std::uint64_t size,
                                                                 ByteSource source) {
    auto content = co_await sandbox::collect(std::move(source), size);
    if (!content) co_return fail(content.error());
    std::vector<std::pair<std::string, std::string>> files;
    files.emplace_back(std::move(path), std::move(*content));
    auto done = co_await upload_files(std::move(files));
    if (!done) co_return fail(done.error());
    if (done->size() != 1) co_return fail(errc::invalid_response, "upload_files gave no response for the file");
    co_return std::move(done->front());
}

asio::awaitable<Result<ExecuteResponse>> Sandbox::execute(std::string command,
                                                          std::optional<std::chrono::seconds> timeout,
                                                          OutputSink sink) {
    auto r = co_await execute(std::move(command), timeout);
    if (!r) co_return r;
    const bool timed_out = r->exit_code == 124 && r->output.rfind("Command timed out after ", 0) == 0;
    if (!timed_out) {
        for (std::string_view rest = r->output; !rest.empty();) {
            const std::string_view piece = rest.substr(0, 1024 * 1024);
            if (!co_await sink(1, piece)) co_return fail(errc::cancelled, "the output sink stopped the command");
            rest.remove_prefix(piece.size());
        }
        r->output.clear();
    }
    co_return r;
}

asio::awaitable<Result<FileDownloadResponse>> Sandbox::download_to(std::string path, ByteSink sink) {
    std::vector<std::string> paths{std::move(path)};
    auto done = co_await download_files(std::move(paths));
    if (!done) co_return fail(done.error());
    if (done->size() != 1) co_return fail(errc::invalid_response, "download_files gave no response for the file");
    FileDownloadResponse r = std::move(done->front());
    if (r.content) {
        for (std::string_view rest = *r.content; !rest.empty();) {
            const std::string_view piece = rest.substr(0, 1024 * 1024);
            if (!co_await sink(piece)) co_return fail(errc::cancelled, "the sink stopped the download of " + r.path);
            rest.remove_prefix(piece.size());
        }
        r.content.reset();
    }
    co_return r;
}

}  // namespace kubesandbox
