#include "copy_command.hpp"

#include "file_commands.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string_view>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace kubesandbox::cli {

namespace asio = boost::asio;

namespace {

constexpr std::size_t piece_size = 1 << 20;

// Closes its descriptor, however the copy ends.
struct Descriptor {
    int fd{-1};
    explicit Descriptor(int f) : fd(f) {}
    Descriptor(const Descriptor&) = delete;
    Descriptor& operator=(const Descriptor&) = delete;
    ~Descriptor() {
        if (fd >= 0) ::close(fd);
    }
};

std::string reason(const std::string& what, const std::string& path) {
    return what + " " + path + ": " + std::strerror(errno);
}

}  // namespace

// The file is read where the coroutine runs: a local disk read in a one-command tool. A pipe or
// a device (no size known before its end) is read whole first.
asio::awaitable<std::optional<std::string>> copy_in(Sandbox& sandbox, const std::string& local,
                                                    const std::string& remote) {
    auto file = std::make_shared<Descriptor>(::open(local.c_str(), O_RDONLY | O_CLOEXEC));
    if (file->fd < 0) co_return reason("cannot read", local);
    struct stat st {};
    if (::fstat(file->fd, &st) != 0) co_return reason("cannot read", local);
    if (S_ISDIR(st.st_mode)) co_return "cannot read " + local + ": a directory";
    ByteSource source;
    std::uint64_t size = 0;
    if (S_ISREG(st.st_mode)) {
        size = static_cast<std::uint64_t>(st.st_size);
        auto buffer = std::make_shared<std::vector<char>>(piece_size);
        source = [file, buffer, local]() -> asio::awaitable<Result<std::string_view>> {
            for (;;) {
                const ssize_t n = ::read(file->fd, buffer->data(), buffer->size());
                if (n >= 0) co_return std::string_view(buffer->data(), static_cast<std::size_t>(n));
                if (errno == EINTR) continue;
                co_return fail(errc::io_error, reason("cannot read", local));
            }
        };
    } else {
        auto whole = read_all(file->fd);
        if (!whole) co_return reason("cannot read", local);
        size = whole->size();
        auto data = std::make_shared<std::string>(std::move(*whole));
        auto at = std::make_shared<std::size_t>(0);
        source = [data, at]() -> asio::awaitable<Result<std::string_view>> {
            std::string_view piece = std::string_view(*data).substr(*at, piece_size);
            *at += piece.size();
            co_return piece;
        };
    }
    auto r = co_await sandbox.upload_from(remote, size, std::move(source));
    if (!r) co_return r.error().describe();
    if (r->error) co_return "upload " + remote + ": " + *r->error;
    co_return std::nullopt;
}

asio::awaitable<std::optional<std::string>> copy_out(Sandbox& sandbox, const std::string& remote,
                                                     const std::string& local) {
    // Through a link, the file it names is the one replaced.
    std::string target = local;
    struct stat st {};
    if (::lstat(local.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
        if (char* real = ::realpath(local.c_str(), nullptr)) {
            target = real;
            std::free(real);
        }
    }
    const bool exists = ::stat(target.c_str(), &st) == 0;
    if (exists && S_ISDIR(st.st_mode)) co_return "cannot write " + local + ": a directory";
    // A device or a pipe (/dev/stdout) is written as it is; a file is written beside itself, on its
    // file system, with its permissions, and renamed over at the end.
    const bool in_place = exists && !S_ISREG(st.st_mode);
    std::string partial;
    std::shared_ptr<Descriptor> file;
    if (in_place) {
        file = std::make_shared<Descriptor>(::open(target.c_str(), O_WRONLY | O_CLOEXEC));
    } else {
        std::random_device random;
        partial = target + ".ksb-partial-" + std::to_string(random());
        file = std::make_shared<Descriptor>(::open(partial.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666));
        if (file->fd >= 0 && exists) ::fchmod(file->fd, st.st_mode & 07777);
    }
    if (file->fd < 0) co_return reason("cannot write", local);
    auto write_error = std::make_shared<std::string>();
    ByteSink sink = [file, write_error, local](std::string_view data) -> asio::awaitable<bool> {
        while (!data.empty()) {
            const ssize_t n = ::write(file->fd, data.data(), data.size());
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) {
                *write_error = reason("cannot write", local);
                co_return false;
            }
            data.remove_prefix(static_cast<std::size_t>(n));
        }
        co_return true;
    };
    auto r = co_await sandbox.download_to(remote, std::move(sink));
    std::optional<std::string> failed;
    if (!write_error->empty()) failed = *write_error;
    else if (!r) failed = r.error().describe();
    else if (r->error) failed = "download " + remote + ": " + *r->error;
    if (!failed && ::close(std::exchange(file->fd, -1)) != 0) failed = reason("cannot write", local);
    if (!in_place) {
        if (!failed && ::rename(partial.c_str(), target.c_str()) != 0) failed = reason("cannot write", local);
        if (failed) ::unlink(partial.c_str());
    }
    co_return failed;
}

}  // namespace kubesandbox::cli
