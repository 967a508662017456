#include "local/cgroups.hpp"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

namespace kubesandbox::local {

namespace fs = std::filesystem;

namespace {

bool write_file(const fs::path& p, const std::string& text) {
    std::ofstream out(p);
    out << text;
    out.flush();
    return static_cast<bool>(out);
}

std::string read_file(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// The kubelet's own cgroup path for a v1 controller (or "" for v2), from /proc/self/cgroup.
std::optional<std::string> own_path(const std::string& controller) {
    std::ifstream in("/proc/self/cgroup");
    std::string line;
    while (std::getline(in, line)) {
        auto a = line.find(':');
        auto b = line.find(':', a + 1);
        if (a == std::string::npos || b == std::string::npos) continue;
        std::string list = line.substr(a + 1, b - a - 1);
        std::stringstream names(list);
        std::string name;
        while (std::getline(names, name, ','))
            if (name == controller) return line.substr(b + 1);
        if (controller.empty() && list.empty()) return line.substr(b + 1);
    }
    return std::nullopt;
}

std::int64_t counter(const fs::path& file, const std::string& key) {
    std::ifstream in(file);
    std::string k;
    std::int64_t v = 0;
    while (in >> k >> v)
        if (k == key) return v;
    return 0;
}

}  // namespace

std::unique_ptr<Cgroups> Cgroups::open(const std::string& name, std::string& why) {
    std::unique_ptr<Cgroups> c(new Cgroups());
    std::error_code ec;
    if (fs::exists("/sys/fs/cgroup/cgroup.controllers", ec)) {
        auto self = own_path("");
        if (!self) {
            why = "no cgroup v2 entry in /proc/self/cgroup";
            return nullptr;
        }
        // A cgroup with processes (ours) cannot hand controllers down: try beside ours first (our
        // parent usually delegates them and holds no process), then below ours.
        fs::path own = fs::path("/sys/fs/cgroup") / fs::path(*self).relative_path();
        std::vector<fs::path> bases;
        if (own != fs::path("/sys/fs/cgroup")) bases.push_back(own.parent_path());
        bases.push_back(own);
        for (const auto& base : bases) {
            fs::path parent = base / name;
            write_file(base / "cgroup.subtree_control", "+memory +pids +cpu");  // may already be on
            if (!fs::create_directory(parent, ec) && ec) continue;
            if (write_file(parent / "cgroup.subtree_control", "+memory +pids +cpu")) {
                c->v2_ = true;
                c->mode_ = "cgroup v2";
                c->parents_ = {parent};
                return c;
            }
            fs::remove(parent, ec);
        }
        why = "cgroup v2: the memory, pids and cpu controllers cannot be delegated next to or below " + own.string() +
              " (run the cluster in a delegated cgroup, e.g. systemd-run --scope -p Delegate=yes)";
        return nullptr;
    }
    for (const char* controller : {"memory", "pids", "cpu"}) {
        auto self = own_path(controller);
        fs::path mount = fs::path("/sys/fs/cgroup") / controller;
        if (!self || !fs::exists(mount / "cgroup.procs", ec)) {
            why = std::string("no cgroup v1 ") + controller + " controller at " + mount.string();
            return nullptr;  // the destructor removes the ones made so far
        }
        fs::path parent = mount / fs::path(*self).relative_path() / name;
        if (!fs::create_directories(parent, ec) && ec) {
            why = "cannot create " + parent.string() + ": " + ec.message();
            return nullptr;  // the destructor removes the ones made so far
        }
        c->parents_.push_back(parent);
    }
    c->mode_ = "cgroup v1";
    return c;
}

Cgroups::~Cgroups() {
    std::error_code ec;
    for (const auto& parent : parents_) {
        for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec))
            if (it->is_directory()) remove(it->path().filename().string());
        fs::remove(parent, ec);
    }
}

std::vector<fs::path> Cgroups::dirs_of(const std::string& key) const {
    std::vector<fs::path> out;
    for (const auto& parent : parents_) out.push_back(parent / key);
    return out;
}

std::string Cgroups::create(const std::string& key, const ResourceLimits& limits) {
    remove(key);
    std::error_code ec;
    for (const auto& dir : dirs_of(key))
        if (!fs::create_directory(dir, ec) && ec) return "cannot create cgroup " + dir.string() + ": " + ec.message();
    auto set = [&](const fs::path& file, const std::string& value) -> std::string {
        return write_file(file, value) ? std::string() : "cannot write " + value + " to " + file.string();
    };
    auto dirs = dirs_of(key);
    std::string problem;
    if (v2_) {
        if (limits.memory_bytes) problem += set(dirs[0] / "memory.max", std::to_string(*limits.memory_bytes));
        if (limits.memory_bytes) set(dirs[0] / "memory.swap.max", "0");  // absent without swap accounting
        problem += set(dirs[0] / "pids.max", std::to_string(limits.pids));
        if (limits.cpu_millis)
            problem += set(dirs[0] / "cpu.max",
                           std::to_string(std::max<std::int64_t>(*limits.cpu_millis * 100, 1000)) + " 100000");
    } else {
        if (limits.memory_bytes) {
            problem += set(dirs[0] / "memory.limit_in_bytes", std::to_string(*limits.memory_bytes));
            if (fs::exists(dirs[0] / "memory.memsw.limit_in_bytes", ec))
                set(dirs[0] / "memory.memsw.limit_in_bytes", std::to_string(*limits.memory_bytes));
        }
        problem += set(dirs[1] / "pids.max", std::to_string(limits.pids));
        if (limits.cpu_millis) {
            // Refused when above the quota of a cgroup above ours: that one then bounds the pod.
            set(dirs[2] / "cpu.cfs_period_us", "100000");
            set(dirs[2] / "cpu.cfs_quota_us", std::to_string(std::max<std::int64_t>(*limits.cpu_millis * 100, 1000)));
        }
    }
    if (!problem.empty()) remove(key);
    return problem;
}

std::vector<std::string> Cgroups::procs_files(const std::string& key) const {
    std::vector<std::string> out;
    for (const auto& dir : dirs_of(key)) out.push_back((dir / "cgroup.procs").string());
    return out;
}

bool Cgroups::oom_killed(const std::string& key) const {
    auto dirs = dirs_of(key);
    if (dirs.empty()) return false;
    return v2_ ? counter(dirs[0] / "memory.events", "oom_kill") > 0
               : counter(dirs[0] / "memory.oom_control", "oom_kill") > 0;
}

bool Cgroups::try_remove(const std::string& key) {
    std::error_code ec;
    bool removed = true;
    for (const auto& dir : dirs_of(key)) {
        if (!fs::exists(dir, ec)) continue;
        // A cgroup with processes cannot be removed: kill them first.
        std::istringstream procs(read_file(dir / "cgroup.procs"));
        pid_t pid;
        while (procs >> pid) ::kill(pid, SIGKILL);
        fs::remove(dir, ec);
        removed = removed && !fs::exists(dir, ec);
    }
    return removed;
}

void Cgroups::remove(const std::string& key) {
    for (int attempt = 0; attempt < 100 && !try_remove(key); ++attempt)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

std::vector<std::string> join_cgroup_argv(const std::vector<std::string>& procs_files, std::vector<std::string> argv) {
    // setpriv first: the shell dies with the kubelet too (it holds no uid change to clear that).
    std::vector<std::string> out = {
        "setpriv",
        "--pdeathsig",
        "KILL",
        "--",
        "/bin/sh",
        "-c",
        "while [ \"$1\" != -- ]; do echo $$ > \"$1\" || exit 126; shift; done; shift; exec \"$@\"",
        "kubesandbox-cgroup"};
    out.insert(out.end(), procs_files.begin(), procs_files.end());
    out.push_back("--");
    out.insert(out.end(), std::make_move_iterator(argv.begin()), std::make_move_iterator(argv.end()));
    return out;
}

}  // namespace kubesandbox::local
