// ExecCredentialProvider against real plugin processes (shell scripts in a temp dir).
#include "kube/exec_plugin.hpp"
#include "proto/kubeconfig.hpp"
#include "support/run_test.hpp"

#include <gtest/gtest.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <signal.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace ks = kubesandbox;
namespace asio = boost::asio;
namespace fs = std::filesystem;
namespace json = boost::json;
using ks::errc;
using ks::kube::Credential;
using ks::kube::ExecCredentialProvider;
using namespace std::chrono_literals;

namespace {

constexpr const char* v1 = "client.authentication.k8s.io/v1";
constexpr const char* v1beta1 = "client.authentication.k8s.io/v1beta1";
constexpr const char* secret = "SECRET-plugin-token-42";

class TempDir {
public:
    TempDir() {
        std::string tmpl = (fs::temp_directory_path() / "ks-exec-XXXXXX").string();
        if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
        path_ = tmpl;
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path_, ec);
    }
    const fs::path& path() const { return path_; }
    fs::path file(std::string_view name) const { return path_ / name; }
    fs::path write(std::string_view name, std::string_view content, bool executable = false) const {
        fs::path p = path_ / name;
        std::ofstream(p, std::ios::binary) << content;
        if (executable) fs::permissions(p, fs::perms::owner_all | fs::perms::group_read | fs::perms::others_read);
        return p;
    }
    std::string read(std::string_view name) const {
        std::ifstream in(path_ / name, std::ios::binary);
        std::stringstream ss;
        ss << in.rdbuf();
        return ss.str();
    }
    // Lines in the counter file the scripts append to on every run.
    int runs() const {
        std::string s = read("count");
        return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
    }

private:
    fs::path path_;
};

std::string credential_json(const char* api, const std::string& token, std::optional<std::string> expiry = {}) {
    json::object status{{"token", token}};
    if (expiry) status["expirationTimestamp"] = *expiry;
    return json::serialize(json::object{{"apiVersion", api}, {"kind", "ExecCredential"}, {"status", status}});
}

std::string rfc3339(std::chrono::system_clock::time_point t) {
    std::time_t tt = std::chrono::system_clock::to_time_t(t);
    std::tm tm{};
    gmtime_r(&tt, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

// A plugin script: counts its runs, then runs `body` (with $D = the temp dir).
fs::path write_plugin(const TempDir& dir, std::string_view name, const std::string& body) {
    std::string script = "#!/bin/sh\nD='" + dir.path().string() + "'\necho run >> \"$D/count\"\n" + body + "\n";
    return dir.write(name, script, true);
}

ks::ExecCredentialConfig plugin_config(const fs::path& command, const char* api = v1) {
    ks::ExecCredentialConfig c;
    c.api_version = api;
    c.command = command.string();
    c.interactive_mode = "Never";
    return c;
}

// Runs provider.get() on `io` (the provider's context) to completion within `limit`.
ks::Result<Credential> get_once(asio::io_context& io, ExecCredentialProvider& provider, bool force = false,
                                std::chrono::milliseconds limit = 10s) {
    io.restart();
    std::optional<ks::Result<Credential>> out;
    ks::test::run_coroutine_test(
        io, [&]() -> asio::awaitable<void> { out = co_await provider.get(force); }, limit);
    if (!out) return ks::fail(errc::timeout, "test: get() did not finish");
    return *out;
}

std::pair<std::string, std::string> make_cert_and_key() {
    EVP_PKEY* key = EVP_EC_gen("P-256");
    X509* cert = X509_new();
    X509_set_version(cert, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(cert), 3);
    X509_gmtime_adj(X509_getm_notBefore(cert), 0);
    X509_gmtime_adj(X509_getm_notAfter(cert), 3600);
    X509_set_pubkey(cert, key);
    X509_NAME* name = X509_get_subject_name(cert);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("plugin"), -1, -1, 0);
    X509_set_issuer_name(cert, name);
    X509_sign(cert, key, EVP_sha256());
    auto text = [](BIO* b) {
        char* d = nullptr;
        long n = BIO_get_mem_data(b, &d);
        std::string s(d, static_cast<std::size_t>(n));
        BIO_free(b);
        return s;
    };
    BIO* b1 = BIO_new(BIO_s_mem());
    PEM_write_bio_X509(b1, cert);
    BIO* b2 = BIO_new(BIO_s_mem());
    PEM_write_bio_PrivateKey(b2, key, nullptr, nullptr, 0, nullptr, nullptr);
    std::pair<std::string, std::string> out{text(b1), text(b2)};
    X509_free(cert);
    EVP_PKEY_free(key);
    return out;
}

void expect_no_secret(const ks::Error& e) {
    EXPECT_EQ(e.message.find("SECRET"), std::string::npos) << e.message;
    EXPECT_EQ(e.message.find("PRIVATE KEY"), std::string::npos) << e.message;
}

bool process_alive(pid_t pid) { return ::kill(pid, 0) == 0; }

}  // namespace

TEST(ExecPlugin, V1TokenWithArgsEnvAndClusterInfo) {
    TempDir dir;
    dir.write("out.json", credential_json(v1, "tok-v1"));
    auto plugin = write_plugin(dir, "plugin.sh",
                               "printf '%s' \"$KUBERNETES_EXEC_INFO\" > \"$D/info\"\n"
                               "printf '%s|%s|%s' \"$1\" \"$2\" \"$FOO\" > \"$D/args\"\n"
                               "echo 'some diagnostics' >&2\n"
                               "cat \"$D/out.json\"");
    auto cfg = plugin_config(plugin);
    cfg.args = {"--flag", "two words"};
    cfg.env = {{"FOO", "bar baz"}};
    ks::proto::ExecClusterInfo info;
    info.server = "https://127.0.0.1:6443";
    info.tls_server_name = "api.internal";
    asio::io_context io;
    ExecCredentialProvider provider(io.get_executor(), cfg, info);
    auto cred = get_once(io, provider);
    ASSERT_TRUE(cred) << cred.error().message;
    EXPECT_EQ(cred->token, "tok-v1");
    EXPECT_FALSE(cred->expiry);
    EXPECT_EQ(dir.read("args"), "--flag|two words|bar baz");
    auto execinfo = json::parse(dir.read("info"));
    EXPECT_EQ(execinfo.at("apiVersion").as_string(), v1);
    EXPECT_EQ(execinfo.at("kind").as_string(), "ExecCredential");
    EXPECT_FALSE(execinfo.at("spec").at("interactive").as_bool());
    EXPECT_EQ(execinfo.at("spec").at("cluster").at("server").as_string(), "https://127.0.0.1:6443");
    EXPECT_EQ(execinfo.at("spec").at("cluster").at("tls-server-name").as_string(), "api.internal");
}

TEST(ExecPlugin, V1beta1CertificateFromKubeconfig) {
    TempDir dir;
    auto [cert, key] = make_cert_and_key();
    json::object status{{"clientCertificateData", cert},
                        {"clientKeyData", key},
                        {"expirationTimestamp", rfc3339(std::chrono::system_clock::now() + 1h)}};
    dir.write("out.json",
              json::serialize(json::object{{"apiVersion", v1beta1}, {"kind", "ExecCredential"}, {"status", status}}));
    write_plugin(dir, "plugin.sh", "printf '%s' \"$KUBERNETES_EXEC_INFO\" > \"$D/info\"\ncat \"$D/out.json\"");
    // The relative command resolves against the kubeconfig's directory.
    auto cfg = ks::parse_kubeconfig(
        "current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
        "clusters: [{name: c, cluster: {server: 'https://10.1.2.3:443', insecure-skip-tls-verify: true}}]\n"
        "users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1beta1, command: ./plugin.sh,"
        " provideClusterInfo: true}}}]\n",
        "mem", dir.path());
    ASSERT_TRUE(cfg) << cfg.error().message;
    asio::io_context io;
    ExecCredentialProvider provider(io.get_executor(), *cfg);
    auto cred = get_once(io, provider);
    ASSERT_TRUE(cred) << cred.error().message;
    EXPECT_EQ(cred->client_certificate_pem, cert);
    EXPECT_EQ(cred->client_key_pem, key);
    EXPECT_TRUE(cred->token.empty());
    ASSERT_TRUE(cred->expiry);
    auto execinfo = json::parse(dir.read("info"));
    EXPECT_EQ(execinfo.at("apiVersion").as_string(), v1beta1);
    EXPECT_EQ(execinfo.at("spec").at("cluster").at("server").as_string(), "https://10.1.2.3:443");
    EXPECT_TRUE(execinfo.at("spec").at("cluster").at("insecure-skip-tls-verify").as_bool());
}

TEST(ExecPlugin, CachesUntilExpiryAndForceRefreshReRuns) {
    TempDir dir;
    dir.write("out.json", credential_json(v1, "tok-cached", rfc3339(std::chrono::system_clock::now() + 1h)));
    auto plugin = write_plugin(dir, "plugin.sh", "cat \"$D/out.json\"");
    asio::io_context io;
    ExecCredentialProvider provider(io.get_executor(), plugin_config(plugin), std::nullopt);
    auto a = get_once(io, provider);
    auto b = get_once(io, provider);
    ASSERT_TRUE(a) << a.error().message;
    ASSERT_TRUE(b) << b.error().message;
    EXPECT_EQ(b->token, "tok-cached");
    EXPECT_EQ(dir.runs(), 1);
    dir.write("out.json", credential_json(v1, "tok-new", rfc3339(std::chrono::system_clock::now() + 1h)));
    auto c = get_once(io, provider, true);
    ASSERT_TRUE(c) << c.error().message;
    EXPECT_EQ(c->token, "tok-new");
    EXPECT_EQ(dir.runs(), 2);
}

TEST(ExecPlugin, ExpiredOrNearlyExpiredCredentialsAreNotReused) {
    TempDir dir;
    // Within the refresh margin: counts as expired.
    dir.write("out.json", credential_json(v1, "tok-short", rfc3339(std::chrono::system_clock::now() + 3s)));
    auto plugin = write_plugin(dir, "plugin.sh", "cat \"$D/out.json\"");
    asio::io_context io;
    ExecCredentialProvider provider(io.get_executor(), plugin_config(plugin), std::nullopt);
    ASSERT_TRUE(get_once(io, provider));
    ASSERT_TRUE(get_once(io, provider));
    EXPECT_EQ(dir.runs(), 2);
}

TEST(ExecPlugin, ConcurrentCallersShareOneRunWithoutBlockingTheLoop) {
    TempDir dir;
    dir.write("out.json", credential_json(v1, "tok-shared"));
    auto plugin = write_plugin(dir, "plugin.sh", "sleep 0.4\ncat \"$D/out.json\"");
    asio::io_context io;
    ExecCredentialProvider provider(io.get_executor(), plugin_config(plugin), std::nullopt);
    std::vector<ks::Result<Credential>> results;
    int ticks = 0;
    bool done = false;
    ks::test::run_coroutine_test(
        io,
        [&]() -> asio::awaitable<void> {
            auto one = [&]() -> asio::awaitable<void> { results.push_back(co_await provider.get(false)); };
            auto force = [&]() -> asio::awaitable<void> { results.push_back(co_await provider.get(true)); };
            asio::co_spawn(io, one(), asio::detached);
            asio::co_spawn(io, one(), asio::detached);
            asio::co_spawn(io, force(), asio::detached);  // joins the run under way
            // The loop keeps serving timers while the plugin sleeps.
            asio::steady_timer t(io);
            while (results.size() < 3) {
                t.expires_after(10ms);
                co_await t.async_wait(asio::use_awaitable);
                ++ticks;
            }
            done = true;
        },
        10s);
    ASSERT_TRUE(done);
    ASSERT_EQ(results.size(), 3u);
    for (const auto& r : results) {
        ASSERT_TRUE(r) << r.error().message;
        EXPECT_EQ(r->token, "tok-shared");
    }
    EXPECT_EQ(dir.runs(), 1);
    EXPECT_GE(ticks, 10);
}

// The caller running the plugin gives up (an `||` with a timer): a later caller still gets a
// credential instead of waiting forever on the abandoned run.
TEST(ExecPlugin, ACancelledRunDoesNotStrandLaterCallers) {
    using namespace asio::experimental::awaitable_operators;
    TempDir dir;
    dir.write("out.json", credential_json(v1, "tok-after"));
    auto plugin = write_plugin(dir, "plugin.sh", "sleep 0.3\ncat \"$D/out.json\"");
    asio::io_context io;
    ExecCredentialProvider provider(io.get_executor(), plugin_config(plugin), std::nullopt);
    std::optional<std::size_t> first_index;
    std::optional<ks::Result<Credential>> joined, later;
    ks::test::run_coroutine_test(
        io,
        [&]() -> asio::awaitable<void> {
            auto join = [&]() -> asio::awaitable<void> {
                asio::steady_timer after(io, 10ms);  // once the call below owns the run
                co_await after.async_wait(asio::use_awaitable);
                joined = co_await provider.get(false);
            };
            asio::steady_timer give_up(io, 50ms);
            asio::co_spawn(io, join(), asio::detached);
            auto first = co_await (provider.get(false) || give_up.async_wait(asio::use_awaitable));
            first_index = first.index();
            later = co_await provider.get(false);
            asio::steady_timer settle(io, 20ms);
            while (!joined) {
                settle.expires_after(20ms);
                co_await settle.async_wait(asio::use_awaitable);
            }
        },
        10s);
    EXPECT_EQ(first_index, 1u);
    ASSERT_TRUE(later);
    ASSERT_TRUE(*later) << later->error().message;
    EXPECT_EQ((*later)->token, "tok-after");
    ASSERT_TRUE(joined);
    ASSERT_TRUE(*joined) << joined->error().message;  // the waiter took over the run
    EXPECT_EQ((*joined)->token, "tok-after");
}

TEST(ExecPlugin, NonZeroExitReportsCodeAndStderrButNotStdout) {
    TempDir dir;
    dir.write("out.json", credential_json(v1, secret));
    auto plugin =
        write_plugin(dir, "plugin.sh", "cat \"$D/out.json\"\necho 'login required: run gcloud auth login' >&2\nexit 3");
    asio::io_context io;
    auto cfg = plugin_config(plugin);
    ExecCredentialProvider provider(io.get_executor(), cfg, std::nullopt);
    auto cred = get_once(io, provider);
    ASSERT_FALSE(cred);
    EXPECT_TRUE(cred.error().is(errc::exec_plugin_failed));
    EXPECT_NE(cred.error().message.find("exit code 3"), std::string::npos) << cred.error().message;
    EXPECT_NE(cred.error().message.find("login required"), std::string::npos) << cred.error().message;
    EXPECT_NE(cred.error().message.find(plugin.string()), std::string::npos) << cred.error().message;
    expect_no_secret(cred.error());
}

TEST(ExecPlugin, LongStderrIsTruncated) {
    TempDir dir;
    auto plugin = write_plugin(dir, "plugin.sh",
                               "i=0\nwhile [ $i -lt 200 ]; do echo 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' >&2; "
                               "i=$((i+1)); done\nexit 1");
    asio::io_context io;
    ExecCredentialProvider provider(io.get_executor(), plugin_config(plugin), std::nullopt);
    auto cred = get_once(io, provider);
    ASSERT_FALSE(cred);
    EXPECT_NE(cred.error().message.find("truncated"), std::string::npos);
    EXPECT_LT(cred.error().message.size(), 1500u);
    EXPECT_GT(cred.error().message.size(), 1000u);
}

TEST(ExecPlugin, GarbageOutputIsAnErrorWithoutQuotingIt) {
    TempDir dir;
    auto garbage = write_plugin(dir, "garbage.sh", std::string("echo 'token: ") + secret + "'");
    asio::io_context io;
    ExecCredentialProvider p1(io.get_executor(), plugin_config(garbage), std::nullopt);
    auto cred = get_once(io, p1);
    ASSERT_FALSE(cred);
    EXPECT_TRUE(cred.error().is(errc::exec_plugin_failed));
    EXPECT_NE(cred.error().message.find("invalid ExecCredential"), std::string::npos) << cred.error().message;
    expect_no_secret(cred.error());

    // Valid JSON, but v1beta1 when v1 is configured.
    dir.write("out.json", credential_json(v1beta1, secret));
    auto wrong = write_plugin(dir, "wrong.sh", "cat \"$D/out.json\"");
    ExecCredentialProvider p2(io.get_executor(), plugin_config(wrong, v1), std::nullopt);
    cred = get_once(io, p2);
    ASSERT_FALSE(cred);
    EXPECT_NE(cred.error().message.find("does not match"), std::string::npos) << cred.error().message;
    expect_no_secret(cred.error());
}

TEST(ExecPlugin, HangingPluginIsKilledAfterTheTimeout) {
    TempDir dir;
    // The script and a child it waits for both record their pids; both must die.
    auto plugin = write_plugin(dir, "plugin.sh",
                               "echo $$ > \"$D/pid\"\nsleep 60 &\necho $! > \"$D/child\"\n"
                               "echo 'waiting for browser login' >&2\nwait");
    asio::io_context io;
    // Two seconds: the script must have written both pids and its line before the kill, also
    // on a loaded machine.
    ExecCredentialProvider provider(io.get_executor(), plugin_config(plugin), std::nullopt, 2s);
    const auto start = std::chrono::steady_clock::now();
    auto cred = get_once(io, provider, false, 15s);
    const auto elapsed = std::chrono::steady_clock::now() - start;
    ASSERT_FALSE(cred);
    EXPECT_TRUE(cred.error().is(errc::exec_plugin_failed));
    EXPECT_NE(cred.error().message.find("timed out after 2 s"), std::string::npos) << cred.error().message;
    EXPECT_NE(cred.error().message.find("waiting for browser login"), std::string::npos) << cred.error().message;
    EXPECT_GE(elapsed, 1950ms);
    EXPECT_LT(elapsed, 10s);
    const pid_t pid = std::stoi(dir.read("pid"));
    const pid_t child = std::stoi(dir.read("child"));
    EXPECT_FALSE(process_alive(pid));  // reaped, not a zombie
    // The grandchild is not ours to reap (init adopts it); give the kernel a moment.
    auto child_state = [child] {
        std::ifstream stat("/proc/" + std::to_string(child) + "/stat");
        std::string line;
        std::getline(stat, line);
        return line;
    };
    bool gone_or_zombie = false;
    for (int i = 0; i < 200 && !gone_or_zombie; ++i) {
        const std::string line = child_state();
        gone_or_zombie = line.empty() || line.find(") Z") != std::string::npos;
        if (!gone_or_zombie) ::usleep(10000);
    }
    EXPECT_TRUE(gone_or_zombie) << child_state();
}

TEST(ExecPlugin, MissingCommandShowsInstallHint) {
    TempDir dir;
    asio::io_context io;
    for (std::string command : {dir.file("no-such-plugin").string(), std::string("kubesandbox-no-such-plugin-xyz")}) {
        auto cfg = plugin_config(command);
        cfg.install_hint = "install it with: apt-get install foo";
        ExecCredentialProvider provider(io.get_executor(), cfg, std::nullopt);
        auto cred = get_once(io, provider);
        ASSERT_FALSE(cred);
        EXPECT_TRUE(cred.error().is(errc::exec_plugin_failed));
        EXPECT_NE(cred.error().message.find("not found"), std::string::npos) << cred.error().message;
        EXPECT_NE(cred.error().message.find("apt-get install foo"), std::string::npos) << cred.error().message;
    }
}

TEST(ExecPlugin, FailureIsNotCachedAndPluginCanRecover) {
    TempDir dir;
    auto plugin = write_plugin(dir, "plugin.sh",
                               "if [ -f \"$D/out.json\" ]; then cat \"$D/out.json\"; else echo nope >&2; exit 1; fi");
    asio::io_context io;
    ExecCredentialProvider provider(io.get_executor(), plugin_config(plugin), std::nullopt);
    EXPECT_FALSE(get_once(io, provider));
    dir.write("out.json", credential_json(v1, "tok-later"));
    auto cred = get_once(io, provider);
    ASSERT_TRUE(cred) << cred.error().message;
    EXPECT_EQ(cred->token, "tok-later");
    EXPECT_EQ(dir.runs(), 2);
}

TEST(ExecPlugin, InteractiveAlwaysIsRefused) {
    TempDir dir;
    auto plugin = write_plugin(dir, "plugin.sh", "exit 0");
    auto cfg = plugin_config(plugin);
    cfg.interactive_mode = "Always";
    asio::io_context io;
    ExecCredentialProvider provider(io.get_executor(), cfg, std::nullopt);
    auto cred = get_once(io, provider);
    ASSERT_FALSE(cred);
    EXPECT_TRUE(cred.error().is(errc::exec_plugin_failed));
    EXPECT_EQ(dir.runs(), 0);
}
