#include "local/runtime/upload_spool.hpp"

#include <cerrno>
#include <cstdlib>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

namespace kubesandbox::runtime {

namespace {

// 0 or errno.
int write_all(int fd, const char* data, std::size_t size) {
    while (size > 0) {
        auto n = ::write(fd, data, size);
        if (n < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        data += n;
        size -= static_cast<std::size_t>(n);
    }
    return 0;
}

// An unlinked file for reading and writing in `directory`, or -1 with errno set.
int anonymous_file(const std::string& directory) {
    int fd = ::open(directory.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)) return fd;
    // A filesystem without O_TMPFILE: a named file, unlinked at once.
    std::string name = directory + "/.upload-XXXXXX";
    fd = ::mkostemp(name.data(), O_CLOEXEC);
    if (fd >= 0) ::unlink(name.c_str());
    return fd;
}

}  // namespace

UploadSpool::UploadSpool(std::vector<std::string> directories) : directories_(std::move(directories)) {}

UploadSpool::~UploadSpool() {
    if (file_ >= 0) ::close(file_);
}

void UploadSpool::on_part(const FormPartHead& head) {
    receiving_ = !filename_ && head.name == "file" && head.filename;
    if (receiving_) filename_ = head.filename;
}

void UploadSpool::on_data(std::string_view data) {
    if (!receiving_ || error_ != 0) return;
    if (file_ < 0 && memory_.size() + data.size() <= memory_limit) {
        memory_.append(data);
        return;
    }
    if (file_ < 0) {
        error_ = ENOENT;  // no directory to try
        for (const auto& directory : directories_) {
            file_ = anonymous_file(directory);
            if (file_ >= 0) break;
            error_ = errno;
        }
        if (file_ < 0) return;
        error_ = write_all(file_, memory_.data(), memory_.size());
        std::string().swap(memory_);
        if (error_ != 0) return;
    }
    error_ = write_all(file_, data.data(), data.size());
}

int UploadSpool::copy_to(int fd) {
    if (file_ < 0) return write_all(fd, memory_.data(), memory_.size());
    off_t size = ::lseek(file_, 0, SEEK_END);
    if (size < 0) return errno;
    // In the kernel where it can; a filesystem or filter that refuses gets read and write.
    off_t offset = 0;
    while (offset < size) {
        auto n = ::copy_file_range(file_, &offset, fd, nullptr, static_cast<std::size_t>(size - offset), 0);
        if (n > 0) continue;
        if (n == 0) return EIO;  // the spool shrank under us
        if (errno == EINTR) continue;
        if (offset == 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP ||
                            errno == EPERM || errno == EBADF)) {
            break;
        }
        return errno;
    }
    std::vector<char> piece(std::size_t(1) << 20);
    while (offset < size) {
        auto n = ::pread(file_, piece.data(), piece.size(), offset);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return n < 0 ? errno : EIO;
        if (int e = write_all(fd, piece.data(), static_cast<std::size_t>(n)); e != 0) return e;
        offset += n;
    }
    return 0;
}

}  // namespace kubesandbox::runtime
