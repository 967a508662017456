// The file operations on real pods of the local cluster, on an image with only busybox (no
// python3, no bash, no GNU tools) and on a full Debian image: one golden corpus, built inside the
// sandbox, and the same expected results (written from DeepAgents 0.7.8's rules) on both.
#include <kubesandbox/file_ops.hpp>
#include <kubesandbox/raw_provider.hpp>
#include <kubesandbox/router_sandbox.hpp>

#include "../support/local_cluster_fixture.hpp"
#include "../support/runtime_pod.hpp"

#include <gtest/gtest.h>

namespace {
namespace asio = boost::asio;
using namespace kubesandbox;
using namespace std::chrono_literals;
using namespace std::string_literals;

// Built with sh and busybox applets only. The root c/ holds no unreadable folder (that is c2/).
constexpr const char* corpus_script = R"SH(set -e
mkdir -p c/dir/.hidden c/dir/sub c2/locked
cd c
printf 'one\r\ntwo\r\nthree\r\n' > crlf.txt
printf 'a\rb\rc' > cr.txt
: > empty.txt
printf '\377\376binary' > early.txt
head -c 9000 /dev/zero | tr '\000' a > late.txt
printf '\n\377\n' >> late.txt
awk 'BEGIN { for (i = 1; i <= 800000; i++) printf "line %07d\n", i }' > big.txt
head -c 6000 /dev/zero | tr '\000' x > long.txt
printf '\nend\n' >> long.txt
printf 'needle one\nno\nneedle two\n' > dir/b.py
printf 'needle\n' > dir/sub/a.py
printf 'needle hidden\n' > dir/.hidden/h.py
printf '# title\n' > dir/c.md
printf 'needle: colon\n' > "odd:name
q's.txt"
printf 'needle out\n' > ../outside.py
ln -s dir/b.py link_in.py
ln -s ../outside.py link_out.py
printf 'x\n' > -dash.txt
printf 'needle\000bin\nneedle\n' > bin.dat
printf 'needle raw\n' > "$(printf 'raw\377`$HOME`.txt')"
cd ../c2
printf 'needle\n' > ok.py
printf 'needle\n' > locked/x.py
chmod 000 locked
echo built
)SH";

std::vector<std::string> paths_of(const std::vector<FileInfo>& infos) {
    std::vector<std::string> out;
    for (const auto& i : infos) out.push_back(i.path);
    return out;
}

class FileOpsTest : public kubesandbox::test::LocalClusterTest, public ::testing::WithParamInterface<const char*> {
protected:
    RawProvider provider() {
        RawProviderOptions cfg;
        cfg.image = GetParam();
        cfg.startup_timeout = 60s;
        return RawProvider(client(), cfg);
    }
};

asio::awaitable<void> check_ls(FileOps& files) {
    auto r = co_await files.ls("/workspace/c");
    EXPECT_TRUE(r && r->entries) << (r ? r->error.value_or("") : r.error().describe());
    if (!r || !r->entries) co_return;
    const std::string c = "/workspace/c/";
    std::vector<std::string> names{
        "-dash.txt",         "big.txt",           "bin.dat",  "cr.txt",     "crlf.txt",    "dir",
        "early.txt",         "empty.txt",         "late.txt", "link_in.py", "link_out.py", "long.txt",
        "odd:name\nq's.txt", "raw\xff`$HOME`.txt"};
    std::vector<std::string> expected;
    for (const auto& n : names) expected.push_back(c + n);
    EXPECT_EQ(paths_of(*r->entries), expected);
    for (const auto& e : *r->entries) EXPECT_EQ(e.is_dir, e.path == c + "dir") << e.path;  // symlinks are not folders

    auto slash = co_await files.ls("/workspace/c/dir/");  // a trailing slash is not doubled
    EXPECT_TRUE(slash && slash->entries);
    if (slash && slash->entries) {
        EXPECT_EQ(paths_of(*slash->entries),
                  (std::vector<std::string>{"/workspace/c/dir/.hidden", "/workspace/c/dir/b.py",
                                            "/workspace/c/dir/c.md", "/workspace/c/dir/sub"}));
    }
    auto missing = co_await files.ls("/workspace/nope");
    EXPECT_TRUE(missing && missing->error == "Path '/workspace/nope': path_not_found" && !missing->entries);
    auto file = co_await files.ls("/workspace/c/cr.txt");
    EXPECT_TRUE(file && file->error == "Path '/workspace/c/cr.txt': not_a_directory");
    auto locked = co_await files.ls("/workspace/c2/locked");
    EXPECT_TRUE(locked && locked->error == "Path '/workspace/c2/locked': permission_denied");
}

asio::awaitable<void> check_read(FileOps& files) {
    auto r = co_await files.read("/workspace/c/crlf.txt");
    EXPECT_TRUE(r && r->file_data && r->file_data->content == "one\ntwo\nthree");
    EXPECT_TRUE(r && r->total_lines == 3 && r->start_line == 1 && r->end_line == 3 && !r->next_offset);
    r = co_await files.read("/workspace/c/cr.txt", 1, 1);
    EXPECT_TRUE(r && r->file_data && r->file_data->content == "b" && r->next_offset == 2 && r->total_lines == 3);
    r = co_await files.read("/workspace/c/empty.txt");
    EXPECT_TRUE(r && r->file_data && r->file_data->content == file_limits::empty_content_warning);
    r = co_await files.read("/workspace/c/early.txt");
    EXPECT_TRUE(r && r->file_data && r->file_data->encoding == "base64" && r->file_data->content == "//5iaW5hcnk=");
    r = co_await files.read("/workspace/c/late.txt", 1, 5);
    EXPECT_TRUE(r && r->file_data && r->file_data->content == "\xEF\xBF\xBD");
    r = co_await files.read("/workspace/c/long.txt");
    EXPECT_TRUE(r && r->file_data && r->file_data->content == std::string(6000, 'x') + "\nend" && r->total_lines == 2);

    // 10 MiB: only the page crosses the wire, total_lines unknown until the page reaches the end.
    r = co_await files.read("/workspace/c/big.txt", 500000, 3);
    EXPECT_TRUE(r && r->file_data) << (r ? r->error.value_or("") : r.error().describe());
    if (r && r->file_data) {
        EXPECT_EQ(r->file_data->content, "line 0500001\nline 0500002\nline 0500003");
        EXPECT_EQ(r->start_line, 500001);
        EXPECT_EQ(r->end_line, 500003);
        EXPECT_FALSE(r->total_lines);
        EXPECT_EQ(r->next_offset, 500003);
    }
    r = co_await files.read("/workspace/c/big.txt", 799998, 10);
    EXPECT_TRUE(r && r->file_data && r->file_data->content == "line 0799999\nline 0800000");
    EXPECT_TRUE(r && r->total_lines == 800000 && !r->next_offset);
    r = co_await files.read("/workspace/c/big.txt", 800000, 1);
    EXPECT_TRUE(r && r->error == "File '/workspace/c/big.txt': Line offset 800000 exceeds file length (800000 lines)");
    r = co_await files.read("/workspace/c/big.txt");
    EXPECT_TRUE(r && r->file_data && r->end_line == 2000 && r->next_offset == 2000 && !r->total_lines);
    if (r && r->file_data) {
        EXPECT_EQ(r->file_data->content.size(), 2000u * 13 - 1);
    }

    r = co_await files.read("/workspace/c/dir");
    EXPECT_TRUE(r && r->error == "File '/workspace/c/dir': not_a_file");
    r = co_await files.read("/workspace/c/none.txt");
    EXPECT_TRUE(r && r->error == "File '/workspace/c/none.txt': file_not_found");
    r = co_await files.read("/workspace/c/odd:name\nq's.txt");
    EXPECT_TRUE(r && r->file_data && r->file_data->content == "needle: colon");
}

asio::awaitable<void> check_write_edit_remove(Sandbox& sandbox, FileOps& files) {
    auto w = co_await files.write("/workspace/new/deep/f.txt", "hello\n");
    EXPECT_TRUE(w && w->path == "/workspace/new/deep/f.txt" && !w->error);
    w = co_await files.write("/workspace/new/deep/f.txt", "bye\n");  // overwrites
    EXPECT_TRUE(w && !w->error);
    auto r = co_await files.read("/workspace/new/deep/f.txt");
    EXPECT_TRUE(r && r->file_data && r->file_data->content == "bye");
    w = co_await files.write("/workspace/c/dir", "x");
    EXPECT_TRUE(w && w->error == "Failed to write file '/workspace/c/dir': is_directory");

    auto e = co_await files.edit("/workspace/c/crlf.txt", "two\nthree", "2\n3", false);
    EXPECT_TRUE(e && e->occurrences == 1 && e->path == "/workspace/c/crlf.txt") << (e ? e->error.value_or("") : "");
    std::vector<std::string> which{"/workspace/c/crlf.txt"};
    auto bytes = co_await sandbox.download_files(which);
    EXPECT_TRUE(bytes && bytes->front().content == "one\r\n2\r\n3\r\n");
    e = co_await files.edit("/workspace/c/dir/b.py", "needle", "pin", false);
    EXPECT_TRUE(e &&
                e->error ==
                    "Error: String 'needle' appears multiple times. Use replace_all=True to replace all occurrences.");
    e = co_await files.edit("/workspace/c/dir/b.py", "needle", "pin", true);
    EXPECT_TRUE(e && e->occurrences == 2);
    e = co_await files.edit("/workspace/c/dir/b.py", "needle", "pin", true);
    EXPECT_TRUE(e && e->error == "Error: String not found in file: 'needle'");
    e = co_await files.edit("/workspace/c/none.txt", "a", "b", false);
    EXPECT_TRUE(e && e->error == "Error: File '/workspace/c/none.txt' not found");
    e = co_await files.edit("/workspace/c/dir", "a", "b", false);
    EXPECT_TRUE(e && e->error == "Error: '/workspace/c/dir' is not a regular file");
    e = co_await files.edit("/workspace/c/early.txt", "a", "b", false);
    EXPECT_TRUE(e && e->error == "Error: File '/workspace/c/early.txt' is not a text file");

    auto d = co_await files.remove("/workspace/new");
    EXPECT_TRUE(d && d->path == "/workspace/new" && !d->error);
    d = co_await files.remove("/workspace/new");
    EXPECT_TRUE(d && d->error == "Error: '/workspace/new' not found");
    d = co_await files.remove("/workspace/c/-dash.txt");
    EXPECT_TRUE(d && !d->error);
    auto gone = co_await sandbox.execute("ls /workspace/c/-dash.txt /workspace/new 2>/dev/null | wc -l");
    EXPECT_TRUE(gone && gone->output == "0\n");
}

asio::awaitable<void> check_glob(FileOps& files) {
    auto g = co_await files.glob("*.py", "/workspace/c");
    EXPECT_TRUE(g && g->matches) << (g ? g->error.value_or("") : g.error().describe());
    if (g && g->matches) {
        // Hidden folders searched, a symlink inside the root kept, one leading outside dropped.
        EXPECT_EQ(paths_of(*g->matches),
                  (std::vector<std::string>{"/workspace/c/dir/.hidden/h.py", "/workspace/c/dir/b.py",
                                            "/workspace/c/dir/sub/a.py", "/workspace/c/link_in.py"}));
        EXPECT_FALSE(g->truncated);
    }
    g = co_await files.glob("**/*.{md,py}", "/workspace/c/");
    EXPECT_TRUE(g && g->matches);
    if (g && g->matches) {
        EXPECT_EQ(paths_of(*g->matches),
                  (std::vector<std::string>{"/workspace/c/dir/b.py", "/workspace/c/dir/c.md",
                                            "/workspace/c/dir/sub/a.py", "/workspace/c/link_in.py"}));
    }
    g = co_await files.glob("dir/*", "/workspace/c");
    EXPECT_TRUE(g && g->matches &&
                paths_of(*g->matches) == (std::vector<std::string>{"/workspace/c/dir/b.py", "/workspace/c/dir/c.md"}));
    g = co_await files.glob("odd*", "/workspace/c");
    EXPECT_TRUE(g && g->matches &&
                paths_of(*g->matches) == (std::vector<std::string>{"/workspace/c/odd:name\nq's.txt"}));
    g = co_await files.glob("*.py", "/workspace/c2");  // an unreadable folder: partial, marked truncated
    EXPECT_TRUE(g && g->matches && paths_of(*g->matches) == (std::vector<std::string>{"/workspace/c2/ok.py"}) &&
                g->truncated);
    g = co_await files.glob("../*", "/workspace/c");
    EXPECT_TRUE(g && g->error == "Path '/workspace/c': invalid_pattern");
    g = co_await files.glob("*", "/workspace/none");
    EXPECT_TRUE(g && g->error == "Path '/workspace/none': path_not_found");
}

asio::awaitable<void> check_grep(FileOps& files) {
    auto g = co_await files.grep("needle", "/workspace/c", "", std::nullopt);
    EXPECT_TRUE(g && g->matches) << (g ? g->error.value_or("") : g.error().describe());
    if (g && g->matches) {
        std::vector<std::string> got;
        for (const auto& m : *g->matches) got.push_back(m.path + "|" + std::to_string(m.line) + "|" + m.text);
        // Symlinks are not followed while recursing (grep -r); files holding NUL bytes are binary.
        EXPECT_EQ(got, (std::vector<std::string>{
                           "/workspace/c/dir/.hidden/h.py|1|needle hidden", "/workspace/c/dir/b.py|1|needle one",
                           "/workspace/c/dir/b.py|3|needle two", "/workspace/c/dir/sub/a.py|1|needle",
                           "/workspace/c/odd:name\nq's.txt|1|needle: colon",
                           "/workspace/c/raw\xff`$HOME`.txt|1|needle raw"}));  // bin.dat holds a NUL: skipped
    }
    g = co_await files.grep("needle", "/workspace/c", "*.py", 2);
    EXPECT_TRUE(g && g->matches && g->matches->size() == 2 && g->truncated);
    g = co_await files.grep("needle", "/workspace/c", "dir/*.py", std::nullopt);
    EXPECT_TRUE(g && g->matches && g->matches->size() == 2 && g->matches->front().path == "/workspace/c/dir/b.py");
    g = co_await files.grep("needle two", "/workspace/c/dir/b.py", "", std::nullopt);
    EXPECT_TRUE(g && g->matches && g->matches->size() == 1 && g->matches->front().path == "/workspace/c/dir/b.py" &&
                g->matches->front().line == 3);
    g = co_await files.grep("two\r", "/workspace/c", "crlf*", std::nullopt);  // lines keep their \r
    EXPECT_TRUE(g && g->matches && g->matches->size() == 1 && g->matches->front().text == "two\r");
    // Metacharacters are literal, and nothing in the pattern runs.
    g = co_await files.grep("$(touch /workspace/pwned) .*[", "/workspace/c", "", std::nullopt);
    EXPECT_TRUE(g && g->matches && g->matches->empty());
    g = co_await files.grep("x", "/workspace/none", "", std::nullopt);
    EXPECT_TRUE(g && g->error == "Path '/workspace/none': path_not_found");
}

// The same checks on any sandbox: a raw pod over exec, or a runtime pod through the router.
asio::awaitable<void> check_corpus(Sandbox& sandbox) {
    auto built = co_await sandbox.execute(corpus_script);
    EXPECT_TRUE(built && built->output == "built\n") << (built ? built->output : built.error().describe());
    FileOps files(sandbox);
    co_await check_ls(files);
    co_await check_read(files);
    co_await check_glob(files);
    co_await check_grep(files);
    co_await check_write_edit_remove(sandbox, files);

    auto nul = co_await files.ls("/workspace/a\0b"s);
    EXPECT_TRUE(!nul && nul.error().code == errc::invalid_argument);
    auto nul_pattern = co_await files.grep("a\0b"s, "", "", std::nullopt);
    EXPECT_TRUE(!nul_pattern && nul_pattern.error().code == errc::invalid_argument);
    auto pwned = co_await sandbox.execute("test -e /workspace/pwned && echo yes || echo no");
    EXPECT_TRUE(pwned && pwned->output == "no\n");
}

TEST_P(FileOpsTest, GoldenCorpusGivesTheSameResultsOnEveryImage) {
    const std::string image = GetParam();
    if (image == "busybox-runtime" || image == "busybox-runtime+tunnel") {
        // agent-sandbox's data plane: the runtime's HTTP API through the router (or tunnelled through
        // the API server's port-forward straight to the runtime), its base directory the corpus's
        // /workspace (so files move through /upload and /download where they can).
        run(
            [&]() -> asio::awaitable<void> {
                auto kube = client();
                // A name per variant: the previous variant's pod may still be terminating (a
                // deletion is graceful), and a second create of its name would meet 409.
                const std::string name = image == "busybox-runtime" ? "files-router" : "files-tunnel";
                auto created =
                    co_await test::create_runtime_pod(kube, "default", name, "busybox-runtime", "/workspace");
                EXPECT_TRUE(created) << (created ? "" : created.error().describe());
                if (!created) co_return;
                RouterSandboxOptions options;
                options.sandbox_name = name;
                options.base_dir = "/workspace";
                std::shared_ptr<RouterConnection> connection;
                if (image == "busybox-runtime") {
                    connection = test::local_router(*cluster_, io_.get_executor());
                } else {
                    TunnelConnectionOptions tunnel;
                    tunnel.pod = name;
                    tunnel.port = 8888;
                    auto made = make_tunnel_connection(kube, tunnel);
                    EXPECT_TRUE(made) << (made ? "" : made.error().describe());
                    if (!made) co_return;
                    connection = *made;
                }
                RouterSandbox sandbox(connection, options);
                co_await check_corpus(sandbox);
                ResourcePath pod{"", "v1", "pods", "default", name};
                co_await kube.remove(pod);
            },
            240s);
        return;
    }
    auto p = provider();
    run(
        [&]() -> asio::awaitable<void> {
            auto sb = co_await p.get_or_create_pod();
            EXPECT_TRUE(sb.has_value()) << (sb ? "" : sb.error().describe());
            if (!sb) co_return;
            co_await check_corpus(**sb);
            co_await p.delete_sandbox((*sb)->pod_name());
        },
        240s);
}

INSTANTIATE_TEST_SUITE_P(Images, FileOpsTest,
                         ::testing::Values("busybox", "debian:12", "busybox-runtime", "busybox-runtime+tunnel"),
                         [](const auto& info) {
                             std::string p = info.param;
                             return p == "busybox"           ? "busybox"
                                    : p == "debian:12"       ? "debian"
                                    : p == "busybox-runtime" ? "agent_sandbox_router"
                                                             : "agent_sandbox_tunnel";
                         });

}  // namespace

namespace {

class FilePolicyTest : public kubesandbox::test::LocalClusterTest {};

std::vector<std::string> outcomes(const std::vector<AuditEvent>& events) {
    std::vector<std::string> out;
    for (const auto& e : events) {
        std::string outcome;
        for (const auto& [k, v] : e.metadata)
            if (k == "outcome") outcome = v;
        out.push_back(e.operation + " " + e.target + " " + outcome);
    }
    return out;
}

TEST_F(FilePolicyTest, VirtualRootAndWritePrefixesHoldAgainstTraversalAndSymlinks) {
    RawProviderOptions cfg;
    cfg.image = "busybox";
    cfg.startup_timeout = 60s;
    RawProvider p(client(), cfg);
    run([&]() -> asio::awaitable<void> {
        auto sb = co_await p.get_or_create_pod();
        EXPECT_TRUE(sb.has_value());
        if (!sb) co_return;
        std::string pod = (*sb)->pod_name();
        std::shared_ptr<Sandbox> sandbox = std::move(*sb);
        auto setup = co_await sandbox->execute(
            "mkdir -p root/sub root/secret && ln -s /etc root/etc_link && ln -s /tmp root/sub/tmp_link && echo ok");
        EXPECT_TRUE(setup && setup->output == "ok\n");

        std::vector<AuditEvent> events;
        FileOpsOptions options;
        options.root_dir = "/workspace/root";
        options.policy.allow_prefixes = {"/workspace/root"};
        options.policy.deny_prefixes = {"/workspace/root/secret"};
        options.policy.audit = [&](const AuditEvent& e) -> Result<void> {
            events.push_back(e);
            return {};
        };
        FileOps files(*sandbox, options);

        auto w = co_await files.write("/a.txt", "needle\n");
        EXPECT_TRUE(w && w->path == "/a.txt" && !w->error) << (w ? w->error.value_or("") : "");
        auto real = co_await sandbox->execute("cat /workspace/root/a.txt");
        EXPECT_TRUE(real && real->output == "needle\n");
        auto ls = co_await files.ls("/");
        EXPECT_TRUE(ls && ls->entries &&
                    paths_of(*ls->entries) == (std::vector<std::string>{"/a.txt", "/etc_link", "/secret", "/sub"}));
        auto g = co_await files.glob("*.txt", "");
        EXPECT_TRUE(g && g->matches && paths_of(*g->matches) == (std::vector<std::string>{"/a.txt"}));
        auto gr = co_await files.grep("needle", "", "", std::nullopt);
        EXPECT_TRUE(gr && gr->matches && gr->matches->size() == 1 && gr->matches->front().path == "/a.txt");
        auto r = co_await files.read("/sub/../a.txt");
        EXPECT_TRUE(r && r->file_data && r->file_data->content == "needle");

        // Escapes: lexical traversal, a symlinked parent, a denied prefix, link/.. tricks.
        r = co_await files.read("/../../etc/passwd");
        EXPECT_TRUE(r && r->error == "File '/../../etc/passwd': invalid_path");
        w = co_await files.write("/etc_link/evil", "x");
        EXPECT_TRUE(w && w->error == "Failed to write file '/etc_link/evil': invalid_path");
        w = co_await files.write("/secret/x", "y");
        EXPECT_TRUE(w && w->error == "Failed to write file '/secret/x': permission_denied");
        auto e = co_await files.edit("/secret/x", "a", "b", false);
        EXPECT_TRUE(e && e->error == "Error: Permission denied editing file '/secret/x'");
        auto d = co_await files.remove("/etc_link");  // rm removes the link itself, not /etc
        EXPECT_TRUE(d && d->path == "/etc_link" && !d->error) << (d ? d->error.value_or("") : "");
        auto etc_kept = co_await sandbox->execute(
            "test -f /etc/passwd && test ! -e /workspace/root/etc_link && echo ok && ln -s /etc "
            "/workspace/root/etc_link");
        EXPECT_TRUE(etc_kept && etc_kept->output == "ok\n");
        d = co_await files.remove("/");  // the root holds the denied /secret
        EXPECT_TRUE(d && d->error == "Error deleting file '/': permission_denied");
        // A dangling symlink would let the write land wherever it points: refused.
        auto dangle = co_await sandbox->execute("ln -s /tmp/not-yet/x /workspace/root/dangling && echo ok");
        EXPECT_TRUE(dangle && dangle->output == "ok\n");
        w = co_await files.write("/dangling", "x");
        EXPECT_TRUE(w && w->error == "Failed to write file '/dangling': permission_denied");
        w = co_await files.write("/sub/tmp_link/../../b.txt", "z");  // lexically /b.txt below the root
        EXPECT_TRUE(w && !w->error);
        auto where = co_await sandbox->execute("ls /workspace/root/b.txt /b.txt 2>/dev/null");
        EXPECT_TRUE(where && where->output == "/workspace/root/b.txt\n");
        auto etc = co_await sandbox->execute("ls /etc/evil 2>/dev/null | wc -l");
        EXPECT_TRUE(etc && etc->output == "0\n");

        auto seen = outcomes(events);
        for (const char* want : {"write /a.txt allowed", "read /../../etc/passwd invalid",
                                 "write /etc_link/evil invalid", "write /secret/x denied", "edit /secret/x denied",
                                 "remove /etc_link allowed", "remove / denied", "write /dangling denied"})
            EXPECT_NE(std::find(seen.begin(), seen.end(), want), seen.end()) << want;

        // A virtual root alone (no prefixes) still keeps writes from leaving it through a symlink.
        FileOpsOptions rooted;
        rooted.root_dir = "/workspace/root";
        FileOps confined(*sandbox, rooted);
        auto out_of_root = co_await confined.write("/sub/tmp_link/escaped", "x");
        EXPECT_TRUE(out_of_root && out_of_root->error == "Failed to write file '/sub/tmp_link/escaped': invalid_path");
        auto escaped = co_await sandbox->execute("test -e /tmp/escaped && echo yes || echo no");
        EXPECT_TRUE(escaped && escaped->output == "no\n");

        // The same policy around the sandbox itself: commands, uploads, downloads.
        FilePolicy policy;
        policy.allow_prefixes = {"/workspace"};
        policy.deny_commands = {"rm -rf"};
        std::vector<AuditEvent> raw_events;
        bool audit_works = true;
        policy.audit = [&](const AuditEvent& ev) -> Result<void> {
            raw_events.push_back(ev);
            if (!audit_works) return fail(errc::io_error, "audit store down");
            return {};
        };
        policy.fail_closed = true;
        policy.logger = Logger::silent();
        PolicySandbox guarded(sandbox, policy);
        auto refused = co_await guarded.execute("cd /workspace && rm -rf root");
        EXPECT_TRUE(refused && refused->exit_code == 126 &&
                    refused->output == "Error: command refused by policy (it contains 'rm -rf')");
        auto still = co_await sandbox->execute("test -d /workspace/root && echo kept");
        EXPECT_TRUE(still && still->output == "kept\n");
        std::vector<std::pair<std::string, std::string>> up{
            {"/workspace/ok.txt", "1"}, {"/etc/evil", "2"}, {"/workspace/root/etc_link/evil2", "3"}, {"rel", "4"}};
        auto uploaded = co_await guarded.upload_files(up);
        EXPECT_TRUE(uploaded && uploaded->size() == 4);
        if (uploaded && uploaded->size() == 4) {
            EXPECT_FALSE((*uploaded)[0].error);
            EXPECT_EQ((*uploaded)[1].error, "permission_denied");
            EXPECT_EQ((*uploaded)[2].error, "permission_denied");
            EXPECT_EQ((*uploaded)[3].error, "invalid_path");
            EXPECT_EQ((*uploaded)[2].path, "/workspace/root/etc_link/evil2");
        }
        audit_works = false;  // fail closed: nothing runs without its audit record
        auto blind = co_await guarded.execute("touch /workspace/unaudited");
        EXPECT_TRUE(blind && blind->exit_code == 126);
        std::vector<std::string> down{"/workspace/ok.txt"};
        auto downloaded = co_await guarded.download_files(down);
        EXPECT_TRUE(downloaded && downloaded->front().error == "permission_denied");
        auto none = co_await sandbox->execute("test -e /workspace/unaudited && echo yes || echo no");
        EXPECT_TRUE(none && none->output == "no\n");
        EXPECT_EQ(raw_events.size(), 7u);
        co_await p.delete_sandbox(pod);
    });
}

}  // namespace
