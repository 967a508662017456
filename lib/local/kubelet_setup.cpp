// The local kubelet's host preparation: what of the host a pod sees, the busybox image root,
// and whether bubblewrap can isolate pods here at all.
#include "local/kubelet_core.hpp"
#include "local/seccomp_filter.hpp"
#include "util/random.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <system_error>
#include <utility>

namespace kubesandbox::local::kubelet_detail {

using boost::system::error_code;
using namespace std::chrono_literals;

constexpr std::uint32_t kOuterUid = 65534;  // host "nobody": owner of sandbox processes when we are root

void Core::prepare_layout() {
    for (const char* name : {"bin", "lib", "lib32", "lib64", "libx32", "sbin", "etc"}) {
        fs::path p = fs::path("/") / name;
        error_code ec;
        auto st = fs::symlink_status(p, ec);
        if (ec) continue;
        if (fs::is_symlink(st)) {
            layout.symlinks[name] = fs::read_symlink(p, ec).string();
        } else if (fs::is_directory(st)) {
            layout.dirs.push_back(name);
        }
    }
    if (::geteuid() == 0) layout.outer_uid = kOuterUid;
    layout.busybox_root = options.data_dir / "images" / "busybox";
}

void Core::make_dir(const fs::path& p) {
    error_code ec;
    fs::create_directories(p, ec);
    if (layout.outer_uid) {
        if (::chown(p.c_str(), *layout.outer_uid, *layout.outer_uid) != 0)
            log("chown " + p.string() + ": " + std::strerror(errno));
    }
}

std::string Core::resolve_sub_path(MountPlan& m) {
    if (m.sub_path.empty()) return {};
    std::string sub = std::exchange(m.sub_path, {});
    make_dir(m.host_path);
    Fd dir(::open(m.host_path.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (dir.fd < 0) return "cannot open volume " + m.name + ": " + std::strerror(errno);
    std::vector<std::string> parts;
    for (std::size_t start = 0; start <= sub.size();) {
        auto end = std::min(sub.find('/', start), sub.size());
        std::string part = sub.substr(start, end - start);
        if (part == "..") return "subPath " + sub + " leaves its volume";
        if (!part.empty() && part != ".") parts.push_back(std::move(part));
        start = end + 1;
    }
    std::string problem = "subPath " + sub + " of volume " + m.name + ": ";
    for (std::size_t i = 0; i < parts.size(); ++i) {
        const char* name = parts[i].c_str();
        struct stat st {};
        if (::fstatat(dir.fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno != ENOENT || ::mkdirat(dir.fd, name, 0755) != 0 ||
                ::fstatat(dir.fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
                return problem + std::strerror(errno);
            if (layout.outer_uid &&
                ::fchownat(dir.fd, name, *layout.outer_uid, *layout.outer_uid, AT_SYMLINK_NOFOLLOW) != 0)
                log("chown " + sub + ": " + std::strerror(errno));
        }
        if (S_ISLNK(st.st_mode)) return problem + parts[i] + " is a symbolic link";
        m.host_path /= parts[i];
        if (i + 1 == parts.size()) break;
        if (!S_ISDIR(st.st_mode)) return problem + parts[i] + " is not a directory";
        Fd next(::openat(dir.fd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (next.fd < 0) return problem + std::strerror(errno);
        dir = std::move(next);
    }
    return {};
}

bool Core::build_busybox_root(std::string& why) {
    fs::path root = layout.busybox_root;
    error_code ec;
    if (fs::exists(root / "bin" / "busybox", ec)) return true;
    fs::path source;
    for (const char* c : {"/bin/busybox", "/usr/bin/busybox"}) {
        if (fs::exists(c, ec)) source = c;
    }
    if (source.empty()) {
        why = "busybox images need a static busybox (apt-get install busybox-static)";
        return false;
    }
    fs::path tmp = root.string() + ".tmp" + util::random_hex(3);
    fs::create_directories(tmp / "bin", ec);
    for (const char* d : {"usr/bin", "usr/sbin", "sbin", "etc", "root", "home", "var", "proc", "dev", "tmp"}) {
        fs::create_directories(tmp / d, ec);
    }
    fs::copy_file(source, tmp / "bin" / "busybox", fs::copy_options::overwrite_existing, ec);
    if (ec) {
        why = "copying busybox: " + ec.message();
        return false;
    }
    // Applets at their usual places (busybox --list-full), as symlinks to /bin/busybox.
    Fd out;
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return false;
    Fd rd(p[0]);
    out = Fd(p[1]);
    Spawn s{{source.string(), "--list-full"}, {"PATH=/usr/bin:/bin"}, {{out.fd, 1}}, false};
    pid_t pid = s.run();
    out.reset();
    std::string list;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(rd.fd, buf, sizeof buf)) > 0) list.append(buf, static_cast<std::size_t>(n));
    if (pid > 0) {
        int st;
        ::waitpid(pid, &st, 0);
    }
    std::istringstream lines(list);
    std::string applet;
    while (std::getline(lines, applet)) {
        if (applet.empty() || applet == "bin/busybox") continue;
        fs::path link = tmp / applet;
        fs::create_directories(link.parent_path(), ec);
        fs::create_symlink("/bin/busybox", link, ec);
    }
    std::ofstream(tmp / "etc" / "passwd")
        << "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n";
    std::ofstream(tmp / "etc" / "group") << "root:x:0:\nnogroup:x:65534:\n";
    fs::rename(tmp, root, ec);
    if (ec && !fs::exists(root / "bin" / "busybox")) {
        why = "installing the busybox root: " + ec.message();
        return false;
    }
    fs::remove_all(tmp, ec);
    return true;
}

bool Core::install_runtime(std::string& why) {
    if (options.runtime_program.empty()) {
        why = "kubesandbox-runtime was not found (set KUBESANDBOX_RUNTIME to its path)";
        return false;
    }
    // A copy below the data dir: pods (as the outer uid) may not reach the build or install folder.
    fs::path dir = options.data_dir / "images" / "runtime";
    fs::path target = dir / "kubesandbox-runtime";
    fs::path tmp = target.string() + ".tmp" + util::random_hex(3);
    error_code ec;
    fs::create_directories(dir, ec);
    fs::copy_file(options.runtime_program, tmp, fs::copy_options::overwrite_existing, ec);
    if (!ec)
        fs::permissions(tmp,
                        fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec | fs::perms::others_read |
                            fs::perms::others_exec,
                        ec);
    if (!ec) fs::rename(tmp, target, ec);
    if (ec) {
        fs::remove(tmp, ec);
        why = "installing " + options.runtime_program.string() + ": " + ec.message();
        return false;
    }
    ::chmod(dir.c_str(), 0755);
    ::chmod(dir.parent_path().c_str(), 0755);
    layout.runtime_program = target;
    return true;
}

bool Core::find_enter_program(std::string& why) {
    std::error_code ec;
    std::vector<fs::path> candidates;
    if (!options.enter_program.empty()) candidates.push_back(options.enter_program);
    if (const char* env = std::getenv("KUBESANDBOX_ENTER"); env && *env) candidates.emplace_back(env);
    if (candidates.empty()) candidates = {KUBESANDBOX_ENTER_INSTALLED, KUBESANDBOX_ENTER_BUILT};
    for (const auto& c : candidates) {
        if (fs::is_regular_file(c, ec) && ::access(c.c_str(), X_OK) == 0) {
            layout.enter_program = fs::absolute(c, ec);
            return true;
        }
    }
    why = "kubesandbox-enter was not found (set KUBESANDBOX_ENTER to its path)";
    return false;
}

Fd Core::seccomp_pipe(std::string& error) const {
    if (seccomp_bytes.empty()) return Fd();
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) {
        error = std::string("cannot make the seccomp filter's pipe: ") + std::strerror(errno);
        return Fd();
    }
    Fd rd(p[0]), wr(p[1]);
    // A few hundred bytes: far below a pipe's buffer, so the write completes at once.
    auto wrote = ::write(wr.fd, seccomp_bytes.data(), seccomp_bytes.size());
    if (wrote != static_cast<ssize_t>(seccomp_bytes.size())) {
        error = std::string("cannot write the seccomp filter: ") + (wrote < 0 ? std::strerror(errno) : "short write");
        return Fd();
    }
    return rd;
}

void Core::use_bwrap_program(std::vector<std::string>& argv) const {
    if (options.bwrap_program.empty() || options.bwrap_program == "bwrap") return;
    for (auto& a : argv)
        if (a == "bwrap") {
            a = options.bwrap_program;
            return;
        }
}

void Core::start_sweeper() {
    // Three passes (a chain caught between two programs shows up in the next), matching the
    // processes whose arguments include one that starts with this kubelet's data folder.
    static constexpr const char* kScript =
        "cat >/dev/null\n"
        "ours() { tr '\\000' '\\n' < \"/proc/$1/cmdline\" 2>/dev/null | "
        "{ while IFS= read -r a; do case $a in \"$KSB_DATA\"*) exit 0;; esac; done; exit 1; }; }\n"
        "for pass in 1 2 3; do\n"
        "  victims=\n"
        "  for p in $(pgrep -x -- \"$KSB_PROGRAM\") $(pgrep -x setpriv) $(pgrep -x sh); do\n"
        "    [ \"$p\" = \"$$\" ] && continue\n"
        "    ours \"$p\" && victims=\"$victims $p $(cat /proc/\"$p\"/task/*/children 2>/dev/null)\"\n"
        "  done\n"
        "  [ -n \"$victims\" ] && kill -KILL $victims 2>/dev/null\n"
        "  sleep 0.1\n"
        "done\n";
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) {
        log(std::string("no sweeper (pipe): ") + std::strerror(errno));
        return;
    }
    Fd rd(p[0]), wr(p[1]);
    Fd null_out(::open("/dev/null", O_WRONLY | O_CLOEXEC));
    std::string program = fs::path(options.bwrap_program.empty() ? "bwrap" : options.bwrap_program).filename();
    Spawn s{{"/bin/sh", "-c", kScript, "kubesandbox-sweeper"},
            {"PATH=/usr/bin:/bin:/usr/sbin:/sbin", "KSB_PROGRAM=" + program.substr(0, 15),
             "KSB_DATA=" + (options.data_dir / "").string()},
            {{rd.fd, 0}, {null_out.fd, 1}, {null_out.fd, 2}},
            true};
    pid_t pid = s.run();
    if (pid < 0) {
        log(std::string("no sweeper: ") + std::strerror(-pid));
        return;
    }
    sweeper = std::move(wr);
    sweeper_pid = pid;  // reaped by shutdown(); if we are killed, it outlives us by design
}

void Core::probe_isolation() {
    fs::path probe = options.data_dir / "pods" / ".probe";
    make_dir(probe);
    ContainerPlan plan;
    plan.root.kind = ImageRoot::Kind::host;
    plan.argv = {"true"};
    plan.working_dir = "/probe";
    plan.uid = 1000;
    plan.gid = 1000;
    plan.mounts.push_back(MountPlan{"", probe, "/probe", false, {}});
    // The filter too, so a bubblewrap that cannot load it is found here rather than by pods.
    std::string filter_error;
    Fd filter = seccomp_pipe(filter_error);
    if (!filter_error.empty()) {
        problem = filter_error;
        return;
    }
    auto argv = bwrap_argv(plan, layout, "probe", 3, filter.fd >= 0 ? 4 : -1, {});
    use_bwrap_program(argv);
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) {
        problem = "pipe failed";
        return;
    }
    Fd rd(p[0]), wr(p[1]);
    Fd err(::open((options.data_dir / "pods" / ".probe.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    Spawn s{argv, {"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"}, {{wr.fd, 3}}, true};
    if (filter.fd >= 0) s.dups.push_back({filter.fd, 4});
    if (err.fd >= 0) s.dups.push_back({err.fd, 2});
    pid_t pid = s.run();
    wr.reset();
    if (pid < 0) {
        problem =
            "cannot start bubblewrap (" + argv[0] + "): " + std::strerror(-pid) + "; install the bubblewrap package";
        return;
    }
    int st = 0;
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (::waitpid(pid, &st, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > deadline) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, &st, 0);
            problem = "bubblewrap did not finish a trivial sandbox within 10 s";
            return;
        }
        ::usleep(5000);
    }
    if (exit_code_of(st) != 0) {
        std::ifstream in(options.data_dir / "pods" / ".probe.log");
        std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
        problem = "bubblewrap cannot create the pod namespaces here (exit " + std::to_string(exit_code_of(st)) +
                  "): " + text + " (user namespaces must be enabled; data_dir must be reachable by uid " +
                  std::to_string(layout.outer_uid.value_or(::geteuid())) + ")";
        return;
    }
    std::string why;
    if (!find_enter_program(why)) {
        problem = why;
        return;
    }
    isolation = true;
}

}  // namespace kubesandbox::local::kubelet_detail

namespace kubesandbox::local {

std::string data_dir_problem(const std::filesystem::path& data_dir) {
    namespace fs = std::filesystem;
    if (::geteuid() != 0) return {};  // pods run as us: what we can create, they can reach
    std::error_code ec;
    auto dir = fs::weakly_canonical(fs::absolute(data_dir, ec), ec);
    if (ec) return {};
    auto searchable = [](const fs::path& p, struct stat& st) {
        if (::stat(p.c_str(), &st) != 0) return true;  // not there yet: created 0755 below
        if (st.st_uid == kubelet_detail::kOuterUid) return (st.st_mode & S_IXUSR) != 0;
        if (st.st_gid == kubelet_detail::kOuterUid) return (st.st_mode & S_IXGRP) != 0;
        return (st.st_mode & S_IXOTH) != 0;
    };
    fs::path on_the_way = dir.root_path();
    const fs::path below_root = dir.relative_path();
    for (auto it = below_root.begin();; ++it) {
        struct stat st {};
        if (!searchable(on_the_way, st)) {
            char mode[8];
            std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
            return "data directory " + dir.string() + " cannot be used: pods run as host uid " +
                   std::to_string(kubelet_detail::kOuterUid) + ", which cannot pass through " + on_the_way.string() +
                   " (mode " + mode + "); choose a data directory below a folder everyone can pass through " +
                   "(e.g. /var/tmp or /srv), or allow it with: chmod o+x " + on_the_way.string();
        }
        if (it == below_root.end()) break;
        on_the_way /= *it;
    }
    return {};
}

}  // namespace kubesandbox::local
