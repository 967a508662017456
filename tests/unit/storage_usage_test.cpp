// The local kubelet's storage accounting: du-like walks in slices, and the eviction decision.
#include "local/storage_usage.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

namespace fs = std::filesystem;
using namespace kubesandbox::local;

namespace {

struct TempDir {
    fs::path path;
    TempDir() {
        path = fs::temp_directory_path() /
               ("storage-usage-" + std::to_string(::getpid()) + "-" + std::to_string(std::random_device{}()));
        fs::create_directories(path);
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

void write_file(const fs::path& p, std::size_t bytes) {
    std::ofstream out(p, std::ios::binary);
    std::string chunk(4096, 'x');
    for (std::size_t n = 0; n < bytes; n += chunk.size()) out.write(chunk.data(), std::min(chunk.size(), bytes - n));
}

std::uint64_t walk_all(std::vector<fs::path> roots, std::size_t budget, int* steps = nullptr) {
    DiskUsageWalk walk(std::move(roots));
    int n = 1;
    while (!walk.step(budget)) ++n;
    if (steps) *steps = n;
    return walk.bytes();
}

}  // namespace

TEST(DiskUsageWalk, CountsAllocatedBytesOnceWithoutFollowingLinks) {
    TempDir dir, outside;
    fs::create_directories(dir.path / "a" / "b");
    write_file(dir.path / "a" / "b" / "big", 1 << 20);
    write_file(dir.path / "small", 10);
    std::uint64_t base = walk_all({dir.path}, 1000);
    EXPECT_GE(base, 1u << 20);
    EXPECT_LT(base, (1u << 20) + 64 * 1024);
    // A hard link adds nothing; a symbolic link to a big file elsewhere adds only itself.
    fs::create_hard_link(dir.path / "a" / "b" / "big", dir.path / "again");
    write_file(outside.path / "huge", 4 << 20);
    fs::create_symlink(outside.path / "huge", dir.path / "link");
    fs::create_directory_symlink(outside.path, dir.path / "dirlink");
    EXPECT_LT(walk_all({dir.path}, 1000), base + 16 * 1024);
    // A missing root counts nothing; several roots add up.
    EXPECT_EQ(walk_all({dir.path / "missing"}, 10), 0u);
    EXPECT_GE(walk_all({dir.path, outside.path}, 1000), base + (4u << 20));
}

TEST(DiskUsageWalk, WalksInSlicesOfTheBudget) {
    TempDir dir;
    for (int i = 0; i < 300; ++i) write_file(dir.path / ("f" + std::to_string(i)), 1);
    int steps = 0;
    std::uint64_t sliced = walk_all({dir.path}, 7, &steps);
    EXPECT_GE(steps, 300 / 7);
    EXPECT_EQ(sliced, walk_all({dir.path}, 100000));
}

TEST(StorageEviction, VolumesFirstThenThePodWithTheKubeletsMessages) {
    ContainerPlan plan;
    EXPECT_FALSE(has_storage_limits(plan));
    plan.empty_dir_limits.push_back(EmptyDirLimit{"data", 1 << 20, "1Mi"});
    plan.limits.ephemeral_storage_bytes = 2 << 20;
    plan.limits.ephemeral_storage_text = "2Mi";
    EXPECT_TRUE(has_storage_limits(plan));
    PodStorageUse use;
    use.volumes["data"] = 1 << 20;  // at the limit is not over it
    use.container = 512 * 1024;
    EXPECT_FALSE(storage_eviction_message(plan, use));
    use.container = (1 << 20) + 1;  // the volume counts toward the pod's total
    EXPECT_EQ(storage_eviction_message(plan, use),
              "Pod ephemeral local storage usage exceeds the total limit of containers 2Mi. ");
    use.volumes["data"] = (1 << 20) + 1;
    EXPECT_EQ(storage_eviction_message(plan, use), "Usage of EmptyDir volume \"data\" exceeds the limit \"1Mi\". ");
    // A volume without a limit counts only toward the pod.
    ContainerPlan unlimited_volume;
    unlimited_volume.limits.ephemeral_storage_bytes = 100;
    unlimited_volume.limits.ephemeral_storage_text = "100";
    PodStorageUse other;
    other.volumes["cache"] = 101;
    EXPECT_TRUE(storage_eviction_message(unlimited_volume, other));
}
