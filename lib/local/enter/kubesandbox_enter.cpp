// kubesandbox-enter: how the local kubelet starts a command exec'd into a pod. In one program
// image it does what a container runtime's exec does: join the pod's cgroups, enter its
// namespaces, take its user, working directory and capability sets, set no_new_privs, install
// the pod's seccomp filter, and exec the command as a child in the pod's pid namespace. It
// stays as that child's parent and ends as the child ends (its exit code, or the same signal).
//
//   kubesandbox-enter --target PID [--target-pidfd FD] --uid UID --gid GID --cwd DIR
//                     [--cgroup-procs FILE]... [--seccomp] -- COMMAND [ARG]...
//
// Failures before the command runs print one line on stderr and exit 126 (127 when the
// command does not exist), as a shell or nsenter would. Static and free of C++ runtime
// machinery on its path, so starting it costs little more than an exec.
//
// With `--serve FD` instead of a command it becomes the pod's spawner: it joins and enters
// once, then starts every command the kubelet sends over the socket FD (spawn_protocol.hpp)
// as a child in the pod, exactly as above, and reports each one's wait status. It stays in the
// host's pid namespace, so nothing in the pod can see, signal or trace it, and every command's
// status reaches the kubelet even when the pod kills all it can. It ends when the kubelet closes
// the socket, or once the pod's first process ended and its last command was reaped.
#include "local/seccomp_filter.hpp"
#include "local/spawn_protocol.hpp"

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

[[noreturn]] void die(int code, const char* what, const char* detail = nullptr) {
    int err = errno;
    if (detail) std::fprintf(stderr, "kubesandbox-enter: %s %s: %s\n", what, detail, std::strerror(err));
    else std::fprintf(stderr, "kubesandbox-enter: %s: %s\n", what, std::strerror(err));
    _exit(code);
}

[[noreturn]] void usage(const char* why) {
    std::fprintf(stderr, "kubesandbox-enter: %s\n", why);
    _exit(126);
}

struct Options {
    long target = 0;
    int target_pidfd = -1;  // a pidfd of `target`, opened when the pod started
    long uid = -1;
    long gid = -1;
    const char* cwd = nullptr;
    std::vector<const char*> cgroup_procs;
    bool seccomp = false;
    int serve = -1;  // the spawner's socket
    char** command = nullptr;
};

long number(const char* text) {
    char* end = nullptr;
    errno = 0;
    long v = std::strtol(text, &end, 10);
    if (errno || !end || *end || v < 0) usage("a number was expected");
    return v;
}

Options parse(int argc, char** argv) {
    Options o;
    int i = 1;
    for (; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--") {
            ++i;
            break;
        }
        if (a == "--seccomp") {
            o.seccomp = true;
            continue;
        }
        if (i + 1 >= argc) usage("an option lacks its value");
        const char* v = argv[++i];
        if (a == "--target") o.target = number(v);
        else if (a == "--uid") o.uid = number(v);
        else if (a == "--gid") o.gid = number(v);
        else if (a == "--target-pidfd") o.target_pidfd = static_cast<int>(number(v));
        else if (a == "--serve") o.serve = static_cast<int>(number(v));
        else if (a == "--cwd") o.cwd = v;
        else if (a == "--cgroup-procs") o.cgroup_procs.push_back(v);
        else usage("unknown option");
    }
    if ((i >= argc && o.serve < 0) || o.target <= 0 || o.uid < 0 || o.gid < 0 || !o.cwd)
        usage("usage: --target --uid --gid --cwd (-- COMMAND | --serve FD)");
    o.command = argv + i;
    return o;
}

void join_cgroups(const Options& o) {
    char pid[32];
    int n = std::snprintf(pid, sizeof pid, "%d\n", static_cast<int>(::getpid()));
    for (const char* file : o.cgroup_procs) {
        int fd = ::open(file, O_WRONLY | O_CLOEXEC);
        if (fd < 0 || ::write(fd, pid, static_cast<std::size_t>(n)) != n) die(126, "cannot join the cgroup", file);
        ::close(fd);
    }
}

// The target's capability sets, as /proc/PID/status shows them.
struct Caps {
    unsigned long long bounding = 0, permitted = 0, effective = 0, inheritable = 0;
};

Caps read_caps(long target) {
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%ld/status", target);
    FILE* f = std::fopen(path, "re");
    if (!f) die(126, "cannot read", path);
    Caps c;
    char line[256];
    int found = 0;
    while (std::fgets(line, sizeof line, f)) {
        unsigned long long v = 0;
        if (std::sscanf(line, "CapBnd: %llx", &v) == 1) c.bounding = v, ++found;
        if (std::sscanf(line, "CapPrm: %llx", &v) == 1) c.permitted = v, ++found;
        if (std::sscanf(line, "CapEff: %llx", &v) == 1) c.effective = v, ++found;
        if (std::sscanf(line, "CapInh: %llx", &v) == 1) c.inheritable = v, ++found;
    }
    std::fclose(f);
    errno = EINVAL;
    if (found != 4) die(126, "cannot parse", path);
    return c;
}

// Enters every namespace of the target that differs from ours. bubblewrap nests the pod's
// user namespace (--disable-userns) inside the one that owns the other namespaces, so root
// enters those first and the user namespace last; without privileges the user namespace is
// what grants the right to enter the others, so what failed is tried again after it.
void enter_namespaces(long target) {
    static const struct {
        const char* name;
        int type;
    } kinds[] = {{"cgroup", CLONE_NEWCGROUP}, {"ipc", CLONE_NEWIPC}, {"uts", CLONE_NEWUTS},  {"net", CLONE_NEWNET},
                 {"pid", CLONE_NEWPID},       {"mnt", CLONE_NEWNS},  {"user", CLONE_NEWUSER}};
    constexpr int kCount = 7;
    int fds[kCount];
    // All opened before any is entered: after the mount namespace, /proc is the pod's.
    for (int i = 0; i < kCount; ++i) {
        char path[64];
        std::snprintf(path, sizeof path, "/proc/%ld/ns/%s", target, kinds[i].name);
        fds[i] = ::open(path, O_RDONLY | O_CLOEXEC);
        if (fds[i] < 0) die(126, "cannot open", path);
        char self[64];
        std::snprintf(self, sizeof self, "/proc/self/ns/%s", kinds[i].name);
        struct stat a {
        }, b{};
        if (::fstat(fds[i], &a) == 0 && ::stat(self, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev) {
            ::close(fds[i]);
            fds[i] = -1;  // shared with us (a host-network pod): nothing to enter
        }
    }
    for (int pass = 0; pass < 2; ++pass) {
        for (int i = 0; i < kCount; ++i) {
            if (fds[i] < 0) continue;
            if (::setns(fds[i], kinds[i].type) != 0) {
                if (pass == 0 && errno == EPERM) continue;
                die(126, "cannot enter the namespace", kinds[i].name);
            }
            ::close(fds[i]);
            fds[i] = -1;
        }
    }
}

void install_seccomp();

// What the command inherits unchanged: the pod's bounding set, no ambient capabilities,
// no_new_privs and the pod's filter. A spawner does this once for all its commands.
void confine(const Options& o, const Caps& caps) {
    // The bounding set first: dropping from it needs CAP_SETPCAP, which the uid change may take.
    for (int cap = 0; cap <= 63; ++cap) {
        if (caps.bounding & (1ULL << cap)) continue;
        if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) die(126, "cannot drop a capability");
    }
    ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    // The filter before the uid change: a pod process with our uid could otherwise trace us in
    // between and make system calls the filter would refuse (it refuses none of those below,
    // nor any a spawner makes).
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) die(126, "cannot set no_new_privs");
    if (o.seccomp) install_seccomp();
}

// The pod's user, groups and capability sets.
void become_user(const Options& o, const Caps& caps) {
    gid_t gid = static_cast<gid_t>(o.gid);
    // A user namespace made without privileges may deny setgroups; then there are none to drop.
    if (::setgroups(0, nullptr) != 0 && errno != EPERM) die(126, "cannot clear the groups");
    if (::setresgid(gid, gid, gid) != 0) die(126, "cannot set the group");
    if (::setresuid(static_cast<uid_t>(o.uid), static_cast<uid_t>(o.uid), static_cast<uid_t>(o.uid)) != 0)
        die(126, "cannot set the user");
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2] = {};
    for (int w = 0; w < 2; ++w) {
        data[w].effective = static_cast<__u32>(caps.effective >> (32 * w));
        data[w].permitted = static_cast<__u32>(caps.permitted >> (32 * w));
        data[w].inheritable = static_cast<__u32>(caps.inheritable >> (32 * w));
    }
    // Always set: entering a user namespace grants every capability in it, and a uid change
    // from a host uid the namespace does not map clears none of them.
    if (::syscall(SYS_capset, &header, data) != 0) die(126, "cannot set the capabilities");
}

void install_seccomp() {
    auto program = kubesandbox::local::runtime_default_seccomp();
    if (program.empty()) return;  // an architecture the filter does not know
    sock_fprog prog{static_cast<unsigned short>(program.size()), program.data()};
    if (::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) die(126, "cannot install the seccomp filter");
}

// The last steps of every command, confined already: its user, working directory, session.
[[noreturn]] void exec_command(const Options& o, const Caps& caps, char** command) {
    become_user(o, caps);
    // No parent-death signal: when the kubelet ends the exec (a closed connection), the
    // command must stay until the client's kill finds it and its descendants by its marker;
    // the pod's pid namespace and cgroup still take it with the pod.
    if (::chdir(o.cwd) != 0) die(126, "cannot enter the working directory", o.cwd);
    // A session of its own, as runc gives every process it starts in a container: nothing in
    // the pod shares the kubelet's session, and the command leads a process group a timeout can
    // kill whole (a client's launcher then needs no setsid program of its own).
    if (::setsid() < 0) die(126, "cannot start a session");
    ::execvp(command[0], command);
    die(errno == ENOENT ? 127 : 126, "cannot execute", command[0]);
}

[[noreturn]] void run_command(const Options& o, const Caps& caps) {
    // Not traceable by the pod's processes until the exec (which makes it dumpable again).
    ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    confine(o, caps);
    exec_command(o, caps, o.command);
}

// Waits for the command and ends the same way: its exit code, or killed by its signal.
[[noreturn]] void relay_end(pid_t child) {
    int status = 0;
    for (;;) {
        pid_t r = ::waitpid(child, &status, 0);
        if (r == child) break;
        if (r < 0 && errno != EINTR) die(126, "cannot wait for the command");
    }
    if (WIFEXITED(status)) _exit(WEXITSTATUS(status));
    int sig = WTERMSIG(status);
    rlimit no_core{0, 0};
    ::setrlimit(RLIMIT_CORE, &no_core);
    ::signal(sig, SIG_DFL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    ::sigprocmask(SIG_UNBLOCK, &one, nullptr);
    ::kill(::getpid(), sig);
    _exit(128 + sig);
}

// The pod's first process is still the one the kubelet started: a pid it pinned with a pidfd
// (when one was passed) cannot have been reused while that process lives, and a pod never
// shares our mount namespace (a reused pid of a host process would).
void check_target(const Options& o) {
    if (o.target_pidfd >= 0 && ::syscall(SYS_pidfd_send_signal, o.target_pidfd, 0, nullptr, 0) != 0)
        die(126, "the pod's first process is gone");
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%ld/ns/mnt", o.target);
    struct stat a {
    }, b{};
    if (::stat(path, &a) != 0) die(126, "cannot read", path);
    if (::stat("/proc/self/ns/mnt", &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev) {
        errno = ESRCH;
        die(126, "the target shares our mount namespace: not a pod");
    }
}

// ---- the spawner (--serve) ----

namespace spawn = kubesandbox::local::spawn_protocol;

void send_reply(int sock, std::uint64_t id, int wait_status) {
    std::string reply = spawn::encode_reply(id, wait_status);
    // Blocking: the kubelet reads every reply. Failing means it is gone, and so are we.
    while (::send(sock, reply.data(), reply.size(), MSG_NOSIGNAL) < 0) {
        if (errno != EINTR) _exit(0);
    }
}

// A command that cannot start gets what a failed kubesandbox-enter gave it: one line on its
// stderr and the status of exit 126.
void refuse(int sock, std::uint64_t id, int err_fd, const char* why, int err) {
    char line[256];
    int n = std::snprintf(line, sizeof line, "kubesandbox-enter: %s: %s\n", why, std::strerror(err));
    std::size_t size = n < 0 ? 0 : std::min(static_cast<std::size_t>(n), sizeof line - 1);
    if (size > 0 && ::write(err_fd, line, size) < 0) {
        // nobody reads the command's stderr: the status still says it
    }
    send_reply(sock, id, 126 << 8);
}

struct Running {
    pid_t pid;
    std::uint64_t id;
};

// Receives one command and starts it. Returns false when the kubelet closed the socket.
bool start_next(const Options& o, const Caps& caps, const sigset_t& original_mask, int sfd, bool pod_gone,
                std::vector<char>& buffer, std::vector<Running>& running) {
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * spawn::kStdioCount)];
    iovec iov{buffer.data(), buffer.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t n = ::recvmsg(o.serve, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n == 0) return false;
    if (n < 0) return errno == EINTR || errno == EAGAIN;
    int fds[spawn::kStdioCount] = {-1, -1, -1};
    int received = 0;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (std::size_t i = 0; i < count; ++i) {
            int fd;
            std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
            if (received < spawn::kStdioCount) fds[received++] = fd;
            else ::close(fd);
        }
    }
    auto close_all = [&] {
        for (int fd : fds)
            if (fd >= 0) ::close(fd);
    };
    auto request = spawn::decode_request(std::string_view(buffer.data(), static_cast<std::size_t>(n)));
    if (!request || received != spawn::kStdioCount || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
        // Not from our kubelet's encoder: start nothing, and answer whatever id it carries.
        if (auto id = spawn::request_id(std::string_view(buffer.data(), static_cast<std::size_t>(n))))
            send_reply(o.serve, *id, 126 << 8);
        close_all();
        return true;
    }
    if (pod_gone) {
        errno = ESRCH;
        refuse(o.serve, request->id, fds[2], "the pod's first process is gone", errno);
        close_all();
        return true;
    }
    pid_t child = ::fork();
    if (child == 0) {
        ::sigprocmask(SIG_SETMASK, &original_mask, nullptr);
        ::close(sfd);
        ::close(o.serve);
        if (o.target_pidfd >= 0) ::close(o.target_pidfd);
        for (int i = 0; i < spawn::kStdioCount; ++i) {
            if (::dup2(fds[i], i) < 0) _exit(126);
        }
        for (int fd : fds)
            if (fd > 2) ::close(fd);
        std::vector<char*> argv;
        for (auto a : request->argv) argv.push_back(const_cast<char*>(a.data()));  // NUL-terminated in buffer
        argv.push_back(nullptr);
        exec_command(o, caps, argv.data());
    }
    if (child < 0) refuse(o.serve, request->id, fds[2], "cannot fork", errno);
    else running.push_back({child, request->id});
    close_all();
    return true;
}

[[noreturn]] void serve(const Options& o, const Caps& caps) {
    // Not traceable by the pod's processes; each command is dumpable again once it execs.
    ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    confine(o, caps);
    sigset_t child_ended, original_mask;
    sigemptyset(&child_ended);
    sigaddset(&child_ended, SIGCHLD);
    // And SIGPIPE blocked: a command's stderr that nobody reads must not end the spawner.
    sigset_t blocked = child_ended;
    sigaddset(&blocked, SIGPIPE);
    ::sigprocmask(SIG_BLOCK, &blocked, &original_mask);
    int sfd = ::signalfd(-1, &child_ended, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0) die(126, "cannot watch for ended commands");
    send_reply(o.serve, 0, 0);  // ready
    std::vector<char> buffer(spawn::kMaxRequest + 1);
    std::vector<Running> running;
    bool pod_gone = false;
    for (;;) {
        pollfd watched[3] = {{o.serve, POLLIN, 0}, {sfd, POLLIN, 0}, {o.target_pidfd, POLLIN, 0}};
        nfds_t count = (o.target_pidfd >= 0 && !pod_gone) ? 3 : 2;
        if (::poll(watched, count, -1) < 0) {
            if (errno == EINTR) continue;
            die(126, "cannot wait for commands");
        }
        if (watched[1].revents) {
            signalfd_siginfo info;
            while (::read(sfd, &info, sizeof info) == sizeof info) {}
            int status = 0;
            pid_t pid;
            while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
                for (std::size_t i = 0; i < running.size(); ++i) {
                    if (running[i].pid != pid) continue;
                    send_reply(o.serve, running[i].id, status);
                    running[i] = running.back();
                    running.pop_back();
                    break;
                }
            }
        }
        // The pod's first process ended: its pid namespace is going, and every command with it.
        if (count == 3 && watched[2].revents) pod_gone = true;
        if (pod_gone && running.empty()) _exit(0);
        if (watched[0].revents & POLLIN) {
            if (!start_next(o, caps, original_mask, sfd, pod_gone, buffer, running)) _exit(0);
        } else if (watched[0].revents & (POLLHUP | POLLERR)) {
            _exit(0);  // the kubelet closed its end
        }
    }
}
}  // namespace

int main(int argc, char** argv) {
    Options o = parse(argc, argv);
    // Dies with the kubelet; the pod's pid namespace takes the command with the pod.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    // As root, drop our supplementary groups while we still may: the pod's user namespace
    // denies setgroups, and the command must not keep host root's groups.
    if (::geteuid() == 0 && ::setgroups(0, nullptr) != 0) die(126, "cannot clear the groups");
    join_cgroups(o);
    check_target(o);
    Caps caps = read_caps(o.target);
    enter_namespaces(o.target);
    // Read and entered while the pinned process lived: nothing above saw another process.
    if (o.target_pidfd >= 0 && ::syscall(SYS_pidfd_send_signal, o.target_pidfd, 0, nullptr, 0) != 0)
        die(126, "the pod's first process is gone");
    // Entering a user namespace changed our credentials, which clears the parent-death signal.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (::getppid() == 1) _exit(126);
    if (o.serve >= 0) serve(o, caps);
    if (o.target_pidfd >= 0) ::close(o.target_pidfd);
    // The pid namespace applies to children only: the command is one.
    pid_t child = ::fork();
    if (child < 0) die(126, "cannot fork");
    if (child == 0) run_command(o, caps);
    relay_end(child);
}
