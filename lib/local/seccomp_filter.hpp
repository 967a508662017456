// The seccomp filter of the local cluster's containers and exec'd commands: close to the
// container runtimes' default profile for a container without added capabilities. Denied
// system calls fail with EPERM (clone3 with ENOSYS, so libc falls back to clone, whose
// namespace flags are then checked); system calls of another ABI (32-bit, x32) fail with
// ENOSYS. Pure: it only builds the BPF program; the kubelet hands it to bubblewrap and
// kubesandbox-enter installs it.
#pragma once

#include <linux/filter.h>

#include <string>
#include <vector>

namespace kubesandbox::local {

// Empty on an architecture the filter does not know (nothing is then enforced).
std::vector<sock_filter> runtime_default_seccomp();

// The program as bubblewrap's --seccomp reads it from a descriptor: the raw instructions.
std::string seccomp_program_bytes(const std::vector<sock_filter>& program);

}  // namespace kubesandbox::local
