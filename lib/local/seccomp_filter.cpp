#include "local/seccomp_filter.hpp"

#include <linux/audit.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <sys/syscall.h>

#include <cerrno>
#include <cstddef>

namespace kubesandbox::local {

namespace {

#if defined(__x86_64__)
constexpr unsigned kNativeArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
constexpr unsigned kNativeArch = AUDIT_ARCH_AARCH64;
#else
constexpr unsigned kNativeArch = 0;
#endif

// What the runtimes' default profile leaves to capabilities a sandbox never has (CAP_SYS_ADMIN,
// CAP_SYS_MODULE, CAP_SYS_TIME, CAP_SYS_BOOT, CAP_SYSLOG, ...) or denies outright.
constexpr long kDenied[] = {
    SYS_acct,
    SYS_add_key,
    SYS_bpf,
    SYS_clock_adjtime,
    SYS_clock_settime,
    SYS_settimeofday,
    SYS_delete_module,
    SYS_finit_module,
    SYS_init_module,
    SYS_kexec_load,
    SYS_keyctl,
    SYS_request_key,
    SYS_lookup_dcookie,
    SYS_mount,
    SYS_umount2,
    SYS_pivot_root,
    SYS_chroot,
    SYS_open_by_handle_at,
    SYS_nfsservctl,
    SYS_perf_event_open,
    SYS_quotactl,
    SYS_reboot,
    SYS_setns,
    SYS_unshare,
    SYS_swapon,
    SYS_swapoff,
    SYS_userfaultfd,
    SYS_vhangup,
    SYS_syslog,
    SYS_sethostname,
    SYS_setdomainname,
    SYS_mbind,
    SYS_set_mempolicy,
    SYS_move_pages,
    SYS_migrate_pages,
    SYS_fsopen,
    SYS_fsconfig,
    SYS_fsmount,
    SYS_fspick,
    SYS_move_mount,
    SYS_open_tree,
    SYS_mount_setattr,
    SYS_io_uring_setup,
    SYS_io_uring_enter,
    SYS_io_uring_register,
#ifdef SYS_kexec_file_load
    SYS_kexec_file_load,
#endif
#ifdef SYS_quotactl_fd
    SYS_quotactl_fd,
#endif
#if defined(__x86_64__)
    SYS_create_module,
    SYS_get_kernel_syms,
    SYS_query_module,
    SYS_iopl,
    SYS_ioperm,
    SYS_sysfs,
    SYS__sysctl,
    SYS_uselib,
    SYS_ustat,
#endif
};

constexpr unsigned kNamespaceFlags =
    CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWCGROUP;

sock_filter stmt(unsigned short code, unsigned k) { return sock_filter{code, 0, 0, k}; }
sock_filter jump(unsigned short code, unsigned k, unsigned char jt, unsigned char jf) {
    return sock_filter{code, jt, jf, k};
}

}  // namespace

std::vector<sock_filter> runtime_default_seccomp() {
    if (kNativeArch == 0) return {};
    const unsigned eperm = SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA);
    const unsigned enosys = SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA);
    std::vector<sock_filter> p;
    // Another ABI (a 32-bit int 0x80 from a 64-bit process) would bypass the numbers below.
    p.push_back(stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)));
    p.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, kNativeArch, 1, 0));
    p.push_back(stmt(BPF_RET | BPF_K, enosys));
    p.push_back(stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)));
#if defined(__x86_64__)
    p.push_back(jump(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1));  // x32
    p.push_back(stmt(BPF_RET | BPF_K, enosys));
#endif
    for (long nr : kDenied) {
        p.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<unsigned>(nr), 0, 1));
        p.push_back(stmt(BPF_RET | BPF_K, eperm));
    }
    p.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 0, 1));
    p.push_back(stmt(BPF_RET | BPF_K, enosys));
    // clone(flags, ...): flags is the first argument on both architectures; its low word holds
    // every namespace flag.
    p.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone, 0, 3));
    p.push_back(stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[0])));
    p.push_back(jump(BPF_JMP | BPF_JSET | BPF_K, kNamespaceFlags, 0, 1));
    p.push_back(stmt(BPF_RET | BPF_K, eperm));
    p.push_back(stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
    return p;
}

std::string seccomp_program_bytes(const std::vector<sock_filter>& program) {
    return std::string(reinterpret_cast<const char*>(program.data()), program.size() * sizeof(sock_filter));
}

}  // namespace kubesandbox::local
