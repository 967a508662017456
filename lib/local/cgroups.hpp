// Resource limits for the local kubelet's pods: one cgroup per container run, below the cgroup
// the kubelet itself runs in (cgroup v2 when /sys/fs/cgroup is unified, else the v1 memory,
// pids and cpu controllers). Used only where the kubelet may write there (usually as root).
#pragma once

#include "local/kubelet_plan.hpp"

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kubesandbox::local {

class Cgroups {
public:
    // nullptr and `why` when no writable cgroup hierarchy with those controllers is reachable.
    static std::unique_ptr<Cgroups> open(const std::string& name, std::string& why);
    ~Cgroups();  // kills what is left in its cgroups and removes them
    Cgroups(const Cgroups&) = delete;
    Cgroups& operator=(const Cgroups&) = delete;

    const std::string& mode() const { return mode_; }  // "cgroup v2" or "cgroup v1"

    // A fresh cgroup for `key` (a pod uid) with these limits (an old one of that key is removed
    // first, so OOM counts are per run). Returns an error message, empty on success.
    std::string create(const std::string& key, const ResourceLimits& limits);
    // The cgroup.procs files a process writes its pid to, to enter every controller's cgroup.
    std::vector<std::string> procs_files(const std::string& key) const;
    // Whether the kernel's OOM killer killed a process of `key`'s cgroup.
    bool oom_killed(const std::string& key) const;
    // SIGKILLs what is left in `key`'s cgroup and removes it if it can at once; false while a
    // dying process still holds it (the kernel empties it shortly: call again then).
    bool try_remove(const std::string& key);
    // try_remove until done, sleeping 10 ms between tries, up to a second: for shutdown only,
    // where nothing else runs on the thread.
    void remove(const std::string& key);

private:
    Cgroups() = default;
    std::vector<std::filesystem::path> dirs_of(const std::string& key) const;

    bool v2_ = false;
    std::string mode_;
    // v2: one directory; v1: memory, pids, cpu, in that order.
    std::vector<std::filesystem::path> parents_;
};

// argv that joins `procs_files` (echo $$ into each, as the kubelet's uid) and then execs
// `argv`, so every process the command starts is inside the limits from its first instruction;
// it dies with the kubelet (parent-death signal) until `argv` takes over.
std::vector<std::string> join_cgroup_argv(const std::vector<std::string>& procs_files, std::vector<std::string> argv);

}  // namespace kubesandbox::local
