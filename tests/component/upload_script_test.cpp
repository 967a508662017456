// The upload script (sandbox/pod_exec_scripts) run as real processes over a pipe, outside any
// sandbox, with GNU's tools, busybox's, and a `dd` without `iflag=fullblock`: the file holds
// exactly the bytes asked for, and the script ends once it has them while its input stays open,
// as a shell session needs; what comes after is left to the session.
#include "sandbox/pod_exec_scripts.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A folder of tools for PATH; the shell that runs the script is `dir/sh`.
class Toolset {
public:
    Toolset() {
        char tmpl[] = "/tmp/ksb-upload-XXXXXX";
        if (mkdtemp(tmpl) != nullptr) dir_ = tmpl;
    }
    ~Toolset() {
        std::error_code ec;
        if (!dir_.empty()) fs::remove_all(dir_, ec);
    }
    const fs::path& dir() const { return dir_; }
    void link(const std::string& name, const std::string& target) const { fs::create_symlink(target, dir_ / name); }
    void write(const std::string& name, const std::string& text) const {
        std::ofstream(dir_ / name) << text;
        fs::permissions(dir_ / name, fs::perms::owner_all);
    }

private:
    fs::path dir_;
};

struct Upload {
    int status{-1};
    std::string file;  // what the script wrote
    std::string rest;  // what was left on its input
};

// Runs the upload script for `path` and `n` bytes with `input` on a pipe, written in uneven
// pieces so that reads come up short, as a shell session does: the input stays open, and only
// once the script has ended does `next` follow (busybox's `head -c` reads ahead whatever is
// there, so a session sends nothing more before the trailers), which `cat` takes. Bounded at 20 s.
Upload run_upload(const Toolset& tools, const fs::path& path, std::size_t n, const std::string& input,
                  const std::string& next) {
    Upload up;
    const fs::path rest = tools.dir() / "rest";
    const std::string wrapper = "(eval \"$UPLOAD\"); echo \"$?\"; exec cat > \"$REST\"";
    const std::string sh = (tools.dir() / "sh").string(), count = std::to_string(n), target = path.string();
    std::vector<char*> argv{const_cast<char*>(sh.c_str()),
                            const_cast<char*>("-c"),
                            const_cast<char*>(wrapper.c_str()),
                            const_cast<char*>("sh"),
                            const_cast<char*>(target.c_str()),
                            const_cast<char*>(count.c_str()),
                            nullptr};
    std::string env_upload = std::string("UPLOAD=") + kubesandbox::sandbox::upload_script;
    std::string env_rest = "REST=" + rest.string(), env_path = "PATH=" + tools.dir().string();
    std::vector<char*> envp{env_upload.data(), env_rest.data(), env_path.data(), nullptr};
    int in[2], out[2];
    if (pipe(in) != 0) return up;
    if (pipe(out) != 0) {
        close(in[0]);
        close(in[1]);
        return up;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    for (int fd : {in[0], in[1], out[0], out[1]}) posix_spawn_file_actions_addclose(&actions, fd);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, sh.c_str(), &actions, &attr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    close(in[0]);
    close(out[1]);
    if (rc != 0) {
        close(in[1]);
        close(out[0]);
        return up;
    }
    std::thread writer([fd = in[1], &input] {
        std::size_t at = 0, piece = 1;
        while (at < input.size()) {
            const std::size_t size = std::min(input.size() - at, piece);
            const ssize_t w = write(fd, input.data() + at, size);
            if (w <= 0) break;
            at += static_cast<std::size_t>(w);
            piece = piece * 7 % 200003 + 1;  // 1, 8, 57, ...: uneven, up to ~200 KB
        }
    });
    // The script's status line, while its input is still open.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    std::string said;
    while (said.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
        pollfd p{out[0], POLLIN, 0};
        if (poll(&p, 1, 50) <= 0) continue;
        char buf[64];
        const ssize_t got = read(out[0], buf, sizeof buf);
        if (got <= 0) break;
        said.append(buf, static_cast<std::size_t>(got));
    }
    writer.join();
    if (said.find('\n') != std::string::npos) {
        up.status = std::stoi(said);
        if (write(in[1], next.data(), next.size()) != static_cast<ssize_t>(next.size())) ADD_FAILURE() << "write";
    } else {
        ADD_FAILURE() << "the upload script did not end within 20 s without the input's end";
        kill(-pid, SIGKILL);
    }
    close(in[1]);
    close(out[0]);
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > deadline) {
            kill(-pid, SIGKILL);
            waitpid(pid, &status, 0);
            ADD_FAILURE() << "cat did not end";
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    up.file = slurp(path);
    up.rest = slurp(rest);
    return up;
}

// Every byte value, in a pattern that does not repeat at 1 MiB.
std::string content(std::size_t n) {
    std::string s(n, '\0');
    for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + i / 1021) & 0xff);
    return s;
}

void uploads_exactly(const Toolset& tools) {
    const std::string next = "NEXT-REQUEST\n";
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{1048575}, std::size_t{1048576},
                          std::size_t{3 * 1048576 + 12345}}) {
        SCOPED_TRACE("n = " + std::to_string(n));
        const fs::path path = tools.dir() / "sub dir" / "file";
        const std::string bytes = content(n);
        const Upload up = run_upload(tools, path, n, bytes, next);
        EXPECT_EQ(up.status, 0);
        EXPECT_EQ(up.file.size(), n);
        EXPECT_TRUE(up.file == bytes) << "the file differs from what was sent";
        EXPECT_EQ(up.rest, next) << "the script read past its bytes";
    }
}

TEST(UploadScript, WritesExactlyItsBytesWithGnuTools) {
    Toolset tools;
    ASSERT_FALSE(tools.dir().empty());
    tools.link("sh", "/bin/sh");
    for (const char* tool : {"dd", "head", "mkdir", "cat"}) tools.link(tool, std::string("/bin/") + tool);
    uploads_exactly(tools);
}

TEST(UploadScript, WritesExactlyItsBytesWithBusybox) {
    if (access("/bin/busybox", X_OK) != 0) GTEST_FAIL() << "busybox is part of the test set-up";
    Toolset tools;
    ASSERT_FALSE(tools.dir().empty());
    for (const char* tool : {"sh", "dd", "head", "mkdir", "cat"}) tools.link(tool, "/bin/busybox");
    uploads_exactly(tools);
}

// A `dd` that knows neither `iflag=fullblock` nor `status=none` (as some builds): the script
// falls back to `head -c` after the one probe.
TEST(UploadScript, FallsBackToHeadWhereDdCannotFillBlocks) {
    Toolset tools;
    ASSERT_FALSE(tools.dir().empty());
    tools.link("sh", "/bin/sh");
    for (const char* tool : {"head", "mkdir", "cat"}) tools.link(tool, std::string("/bin/") + tool);
    const fs::path log = tools.dir() / "dd.log";
    tools.write("dd", "#!/bin/sh\necho \"$*\" >> '" + log.string() +
                          "'\n"
                          "case \"$*\" in *iflag=*|*status=*) echo 'dd: invalid argument' >&2; exit 1 ;; esac\n"
                          "exec /bin/dd \"$@\"\n");
    uploads_exactly(tools);
    // Only the uploads of a MiB or more asked, once each, and none used dd to write.
    const std::string probe = "if=/dev/null of=/dev/null iflag=fullblock status=none count=0\n";
    EXPECT_EQ(slurp(log), probe + probe);
}

}  // namespace
