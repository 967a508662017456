// Local ephemeral storage of a pod, as a kubelet's eviction manager sees it: disk usage of the
// pod's writable folders, measured in slices so the cluster's thread never stalls on a big
// tree, and the decision to evict (emptyDir sizeLimit, then the containers' ephemeral-storage
// limit for the whole pod) with the kubelet's messages. Pure apart from reading the tree.
#pragma once

#include "local/kubelet_plan.hpp"

#include <dirent.h>
#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace kubesandbox::local {

// Bytes allocated below some folders (st_blocks, like du), symbolic links not followed, other
// file systems not entered, a file with several links counted once.
class DiskUsageWalk {
public:
    explicit DiskUsageWalk(std::vector<std::filesystem::path> roots);
    ~DiskUsageWalk();
    DiskUsageWalk(const DiskUsageWalk&) = delete;
    DiskUsageWalk& operator=(const DiskUsageWalk&) = delete;
    // Looks at up to `budget` entries; true once every folder has been walked.
    bool step(std::size_t budget);
    std::uint64_t bytes() const { return bytes_; }

private:
    struct Pending {
        std::filesystem::path dir;
        dev_t device;
    };
    void visit(const std::filesystem::path& path, std::optional<dev_t> device);

    std::vector<Pending> dirs_;
    Pending current_{};
    DIR* open_ = nullptr;  // the folder being read, kept open across steps
    std::vector<std::filesystem::path> roots_;
    std::set<std::pair<dev_t, ino_t>> linked_;
    std::uint64_t bytes_ = 0;
};

// What the walks found: bytes per emptyDir volume, and the container's own writable folders
// (workspace, /tmp) with its log.
struct PodStorageUse {
    std::map<std::string, std::uint64_t> volumes;
    std::uint64_t container = 0;
};

// The eviction message when the pod uses more than it may, else nullopt.
std::optional<std::string> storage_eviction_message(const ContainerPlan& plan, const PodStorageUse& use);

// Whether a pod's storage must be watched at all.
bool has_storage_limits(const ContainerPlan& plan);

}  // namespace kubesandbox::local
