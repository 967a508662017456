// Where the local sandbox runtime keeps an upload's file part until the body is complete, as
// python-runtime does (its form parser spools to a temporary file past 1 MiB): a body that
// breaks off or turns out malformed writes nothing to the target. Up to 1 MiB stays in memory,
// the rest goes to an unlinked temporary file, so memory stays flat whatever the file's size.
#pragma once

#include "local/runtime/multipart_reader.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kubesandbox::runtime {

class UploadSpool final : public MultipartReader::Events {
public:
    static constexpr std::size_t memory_limit = std::size_t(1) << 20;

    // `directories`: where a temporary file may go, tried in order.
    explicit UploadSpool(std::vector<std::string> directories);
    ~UploadSpool();
    UploadSpool(const UploadSpool&) = delete;
    UploadSpool& operator=(const UploadSpool&) = delete;

    // The first part named "file" with a filename is kept; other parts are skipped.
    void on_part(const FormPartHead& head) override;
    void on_data(std::string_view data) override;

    // The kept part's filename, nullopt when the body had none.
    const std::optional<std::string>& filename() const { return filename_; }
    // errno of a failure to keep the data (no temporary file, disk full), 0 if none.
    int spool_error() const { return error_; }
    // Writes the kept data to `fd` from its current offset; 0 or the errno of the failed write.
    int copy_to(int fd);

private:
    std::vector<std::string> directories_;
    std::optional<std::string> filename_;
    bool receiving_ = false;
    std::string memory_;
    int file_ = -1;
    int error_ = 0;
};

}  // namespace kubesandbox::runtime
