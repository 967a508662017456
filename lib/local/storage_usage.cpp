#include "local/storage_usage.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <dirent.h>

#include <string_view>

namespace kubesandbox::local {

DiskUsageWalk::DiskUsageWalk(std::vector<std::filesystem::path> roots) : roots_(std::move(roots)) {}

void DiskUsageWalk::visit(const std::filesystem::path& path, std::optional<dev_t> device) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return;  // gone meanwhile
    if (device && st.st_dev != *device) return;   // another file system mounted below
    if (!S_ISDIR(st.st_mode) && st.st_nlink > 1 && !linked_.insert({st.st_dev, st.st_ino}).second) return;
    bytes_ += static_cast<std::uint64_t>(st.st_blocks) * 512;
    if (S_ISDIR(st.st_mode)) dirs_.push_back({path, st.st_dev});
}

DiskUsageWalk::~DiskUsageWalk() {
    if (open_) ::closedir(open_);
}

bool DiskUsageWalk::step(std::size_t budget) {
    while (budget > 0) {
        if (!roots_.empty()) {
            auto root = std::move(roots_.back());
            roots_.pop_back();
            visit(root, std::nullopt);
            --budget;
            continue;
        }
        if (!open_) {
            if (dirs_.empty()) return true;
            current_ = std::move(dirs_.back());
            dirs_.pop_back();
            int fd = ::open(current_.dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (fd < 0) continue;  // gone or unreadable: counted as its own entry only
            open_ = ::fdopendir(fd);
            if (!open_) {
                ::close(fd);
                continue;
            }
        }
        dirent* e = ::readdir(open_);
        if (!e) {
            ::closedir(open_);
            open_ = nullptr;
            continue;
        }
        std::string_view name = e->d_name;
        if (name == "." || name == "..") continue;
        visit(current_.dir / e->d_name, current_.device);
        --budget;
    }
    return roots_.empty() && dirs_.empty() && !open_;
}

bool has_storage_limits(const ContainerPlan& plan) {
    return plan.limits.ephemeral_storage_bytes.has_value() || !plan.empty_dir_limits.empty();
}

std::optional<std::string> storage_eviction_message(const ContainerPlan& plan, const PodStorageUse& use) {
    // The order and wording of a kubelet's eviction manager: volumes first, then the pod.
    for (const auto& limit : plan.empty_dir_limits) {
        auto it = use.volumes.find(limit.name);
        if (it != use.volumes.end() && it->second > static_cast<std::uint64_t>(limit.bytes))
            return "Usage of EmptyDir volume \"" + limit.name + "\" exceeds the limit \"" + limit.text + "\". ";
    }
    if (plan.limits.ephemeral_storage_bytes) {
        std::uint64_t total = use.container;
        for (const auto& [name, bytes] : use.volumes) total += bytes;
        if (total > static_cast<std::uint64_t>(*plan.limits.ephemeral_storage_bytes))
            return "Pod ephemeral local storage usage exceeds the total limit of containers " +
                   plan.limits.ephemeral_storage_text + ". ";
    }
    return std::nullopt;
}

}  // namespace kubesandbox::local
