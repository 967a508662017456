// kubeconfig parsing and merging (kubectl's rules), in-cluster config. Only files are read here;
// no sockets, no processes.
#include "proto/kubeconfig.hpp"

#include <kubesandbox/kube_config.hpp>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <yaml-cpp/yaml.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>

namespace kubesandbox {
namespace proto {

namespace {

struct BioFree {
    void operator()(BIO* b) const noexcept { BIO_free(b); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;

BioPtr memory_bio(std::string_view data) {
    // BIO_new_mem_buf takes an int length; our PEM inputs are far below 2 GiB.
    if (data.size() > 0x7fffffff) return nullptr;
    return BioPtr(BIO_new_mem_buf(data.data(), static_cast<int>(data.size())));
}

}  // namespace

bool pem_has_certificates(std::string_view pem) {
    auto bio = memory_bio(pem);
    if (!bio) return false;
    int count = 0;
    for (;;) {
        X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr);
        if (cert == nullptr) break;
        X509_free(cert);
        ++count;
    }
    // The loop ends with "no start line" at EOF; anything else means a broken certificate.
    const unsigned long err = ERR_peek_last_error();
    const bool clean_end = ERR_GET_LIB(err) == ERR_LIB_PEM && ERR_GET_REASON(err) == PEM_R_NO_START_LINE;
    ERR_clear_error();
    return count > 0 && clean_end;
}

bool pem_has_private_key(std::string_view pem) {
    auto bio = memory_bio(pem);
    if (!bio) return false;
    // An empty passphrase callback: encrypted keys are rejected instead of prompting on a TTY.
    auto no_password = [](char*, int, int, void*) -> int { return 0; };
    EVP_PKEY* key = PEM_read_bio_PrivateKey(bio.get(), nullptr, no_password, nullptr);
    ERR_clear_error();
    if (key == nullptr) return false;
    EVP_PKEY_free(key);
    return true;
}

}  // namespace proto

namespace {
namespace fs = std::filesystem;

constexpr std::size_t max_file_size = 16 * 1024 * 1024;

// Reads a whole regular file; the error text names the path and errno, never the content.
Result<std::string> read_file(const fs::path& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return fail(errc::invalid_config, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        const bool dir = S_ISDIR(st.st_mode);
        ::close(fd);
        return fail(errc::invalid_config, dir ? "is a directory" : "not a regular file");
    }
    std::string out;
    char buf[8192];
    for (;;) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0) {
            if (errno == EINTR) continue;
            int saved = errno;
            ::close(fd);
            return fail(errc::invalid_config, std::strerror(saved));
        }
        if (n == 0) break;
        out.append(buf, static_cast<std::size_t>(n));
        if (out.size() > max_file_size) {
            ::close(fd);
            return fail(errc::invalid_config, "file too large");
        }
    }
    ::close(fd);
    return out;
}

fs::path resolve_path(const fs::path& base_dir, const std::string& p) {
    fs::path path(p);
    if (path.is_relative() && !base_dir.empty()) return base_dir / path;
    return path;
}

std::string trim(std::string s) {
    const char* ws = " \t\r\n";
    auto b = s.find_first_not_of(ws);
    if (b == std::string::npos) return {};
    auto e = s.find_last_not_of(ws);
    return s.substr(b, e - b + 1);
}

// One named entry of clusters/users/contexts, remembered with the file it came from.
struct Entry {
    YAML::Node body;
    fs::path base_dir;
    std::string source;
};

struct RawConfig {
    std::map<std::string, Entry> clusters, users, contexts;
    std::string current_context;
    std::vector<std::string> sources;
};

// Error context for one entry: "kubeconfig <file>: users[dev].user".
struct Where {
    const std::string& source;
    std::string path;

    Error error(std::string_view field, std::string_view what) const {
        std::string m = "kubeconfig " + source + ": " + path;
        if (!field.empty()) {
            if (!path.empty()) m += '.';
            m += field;
        }
        m += ": ";
        m += what;
        return make_error(errc::invalid_config, std::move(m));
    }
};

Result<std::string> get_string(const YAML::Node& map, const char* key, const Where& where) {
    YAML::Node n = map[key];
    if (!n || n.IsNull()) return std::string();
    if (!n.IsScalar()) return tl::unexpected(where.error(key, "expected a string"));
    return n.Scalar();
}

Result<bool> get_bool(const YAML::Node& map, const char* key, const Where& where) {
    YAML::Node n = map[key];
    if (!n || n.IsNull()) return false;
    bool v = false;
    if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v))
        return tl::unexpected(where.error(key, "expected true or false"));
    return v;
}

// Merges the named list `key` of one document into `into`; the first definition of a name wins.
Result<void> merge_list(const YAML::Node& doc, const char* key, const char* body_key,
                        std::map<std::string, Entry>& into, const std::string& source, const fs::path& base_dir) {
    YAML::Node list = doc[key];
    if (!list || list.IsNull()) return {};
    Where top{source, key};
    if (!list.IsSequence()) return tl::unexpected(top.error("", "expected a list"));
    std::size_t index = 0;
    for (const auto& item : list) {
        Where at{source, std::string(key) + "[" + std::to_string(index++) + "]"};
        if (!item.IsMap()) return tl::unexpected(at.error("", "expected a mapping"));
        auto name = get_string(item, "name", at);
        if (!name) return tl::unexpected(name.error());
        if (name->empty()) return tl::unexpected(at.error("name", "missing"));
        YAML::Node body = item[body_key];
        if (body && !body.IsNull() && !body.IsMap()) {
            Where named{source, std::string(key) + "[" + *name + "]"};
            return tl::unexpected(named.error(body_key, "expected a mapping"));
        }
        if (!body || body.IsNull()) body = YAML::Node(YAML::NodeType::Map);
        into.try_emplace(*name, Entry{body, base_dir, source});
    }
    return {};
}

// yaml-cpp recurses once per nesting level, so hostile input ("[[[[...", "- - - - ...") could
// overflow the stack. Real kubeconfigs nest a handful of levels; refuse anything absurd.
bool nests_too_deep(std::string_view yaml) {
    constexpr int limit = 64;
    int flow = 0;
    bool line_start = true;
    int dashes = 0;
    for (std::size_t i = 0; i < yaml.size(); ++i) {
        const char c = yaml[i];
        if (c == '\n') {
            line_start = true;
            dashes = 0;
            continue;
        }
        if (c == '[' || c == '{') {
            if (++flow > limit) return true;
        } else if ((c == ']' || c == '}') && flow > 0) {
            --flow;
        }
        if (line_start) {
            if (c == '-' && i + 1 < yaml.size() && (yaml[i + 1] == ' ' || yaml[i + 1] == '\t')) {
                if (++dashes > limit) return true;
            } else if (c != ' ' && c != '\t' && c != '-') {
                line_start = false;
            }
        }
    }
    return false;
}

Result<void> merge_document_unsafe(RawConfig& raw, std::string_view yaml, const std::string& source,
                                   const fs::path& base_dir) {
    if (nests_too_deep(yaml))
        return fail(errc::invalid_config, "kubeconfig " + source + ": nested more than 64 levels deep");
    YAML::Node doc = YAML::Load(std::string(yaml));
    raw.sources.push_back(source);
    if (!doc || doc.IsNull()) return {};  // an empty file is an empty config
    if (!doc.IsMap())
        return fail(errc::invalid_config, "kubeconfig " + source + ": expected a mapping at the top level");
    Where top{source, ""};
    if (auto kind = get_string(doc, "kind", top); !kind) {
        return tl::unexpected(kind.error());
    } else if (!kind->empty() && *kind != "Config") {
        return fail(errc::invalid_config, "kubeconfig " + source + ": kind is not Config");
    }
    if (auto r = merge_list(doc, "clusters", "cluster", raw.clusters, source, base_dir); !r) return r;
    if (auto r = merge_list(doc, "users", "user", raw.users, source, base_dir); !r) return r;
    if (auto r = merge_list(doc, "contexts", "context", raw.contexts, source, base_dir); !r) return r;
    YAML::Node cc = doc["current-context"];
    if (cc && !cc.IsNull()) {
        if (!cc.IsScalar())
            return fail(errc::invalid_config, "kubeconfig " + source + ": current-context: expected a string");
        if (raw.current_context.empty()) raw.current_context = cc.Scalar();
    }
    return {};
}

Result<void> merge_document(RawConfig& raw, std::string_view yaml, const std::string& source,
                            const fs::path& base_dir) {
    try {
        return merge_document_unsafe(raw, yaml, source, base_dir);
    } catch (const YAML::Exception& e) {
        // e.msg is yaml-cpp's generic text ("end of map not found"), never document content.
        std::string m = "kubeconfig " + source + ": invalid YAML";
        if (!e.mark.is_null())
            m += " at line " + std::to_string(e.mark.line + 1) + ", column " + std::to_string(e.mark.column + 1);
        m += ": " + e.msg;
        return fail(errc::invalid_config, std::move(m));
    } catch (const std::exception&) {
        return fail(errc::invalid_config, "kubeconfig " + source + ": cannot be parsed");
    }
}

enum class PemKind { certificates, private_key };

// `<name>-data` (base64) wins over `<name>` (a path relative to the defining file).
Result<std::string> load_pem(const Entry& entry, const Where& where, const char* file_key, const char* data_key,
                             PemKind kind) {
    auto data = get_string(entry.body, data_key, where);
    if (!data) return tl::unexpected(data.error());
    const char* what = kind == PemKind::certificates ? "not a valid PEM certificate" : "not a valid PEM private key";
    auto valid = [&](const std::string& pem) {
        return kind == PemKind::certificates ? proto::pem_has_certificates(pem) : proto::pem_has_private_key(pem);
    };
    if (!data->empty()) {
        auto decoded = proto::base64_decode(*data);
        if (!decoded) return tl::unexpected(where.error(data_key, "invalid base64"));
        if (!valid(*decoded)) return tl::unexpected(where.error(data_key, what));
        return std::move(*decoded);
    }
    auto file = get_string(entry.body, file_key, where);
    if (!file) return tl::unexpected(file.error());
    if (file->empty()) return std::string();
    const fs::path path = resolve_path(entry.base_dir, *file);
    auto content = read_file(path);
    if (!content)
        return tl::unexpected(where.error(file_key, "cannot read " + path.string() + ": " + content.error().message));
    if (!valid(*content)) return tl::unexpected(where.error(file_key, path.string() + " is " + what));
    return content;
}

Result<ExecCredentialConfig> load_exec(const Entry& entry, const YAML::Node& exec, const Where& user_where) {
    Where where{user_where.source, user_where.path + ".exec"};
    if (!exec.IsMap()) return tl::unexpected(where.error("", "expected a mapping"));
    ExecCredentialConfig out;
    auto api = get_string(exec, "apiVersion", where);
    if (!api) return tl::unexpected(api.error());
    if (*api != "client.authentication.k8s.io/v1" && *api != "client.authentication.k8s.io/v1beta1") {
        if (api->empty()) return tl::unexpected(where.error("apiVersion", "missing"));
        return tl::unexpected(
            where.error("apiVersion", "unsupported (want client.authentication.k8s.io/v1 or v1beta1)"));
    }
    out.api_version = *api;
    auto command = get_string(exec, "command", where);
    if (!command) return tl::unexpected(command.error());
    if (command->empty()) return tl::unexpected(where.error("command", "missing"));
    // A command with a slash is a path relative to the kubeconfig; a bare name is looked up in PATH.
    if (command->find('/') != std::string::npos) out.command = resolve_path(entry.base_dir, *command).string();
    else out.command = *command;
    YAML::Node args = exec["args"];
    if (args && !args.IsNull()) {
        if (!args.IsSequence()) return tl::unexpected(where.error("args", "expected a list of strings"));
        for (const auto& a : args) {
            if (!a.IsScalar()) return tl::unexpected(where.error("args", "expected a list of strings"));
            out.args.push_back(a.Scalar());
        }
    }
    YAML::Node env = exec["env"];
    if (env && !env.IsNull()) {
        if (!env.IsSequence()) return tl::unexpected(where.error("env", "expected a list of {name, value}"));
        for (const auto& e : env) {
            if (!e.IsMap()) return tl::unexpected(where.error("env", "expected a list of {name, value}"));
            auto name = get_string(e, "name", where);
            if (!name) return tl::unexpected(name.error());
            auto value = get_string(e, "value", where);
            if (!value) return tl::unexpected(value.error());
            if (name->empty() || name->find('=') != std::string::npos)
                return tl::unexpected(where.error("env", "invalid variable name"));
            out.env.emplace_back(std::move(*name), std::move(*value));
        }
    }
    auto pci = get_bool(exec, "provideClusterInfo", where);
    if (!pci) return tl::unexpected(pci.error());
    out.provide_cluster_info = *pci;
    auto hint = get_string(exec, "installHint", where);
    if (!hint) return tl::unexpected(hint.error());
    out.install_hint = std::move(*hint);
    auto mode = get_string(exec, "interactiveMode", where);
    if (!mode) return tl::unexpected(mode.error());
    if (mode->empty()) {
        if (out.api_version == "client.authentication.k8s.io/v1")
            return tl::unexpected(where.error("interactiveMode", "required for client.authentication.k8s.io/v1"));
        *mode = "IfAvailable";
    }
    if (*mode != "Never" && *mode != "IfAvailable" && *mode != "Always")
        return tl::unexpected(where.error("interactiveMode", "must be Never, IfAvailable or Always"));
    out.interactive_mode = std::move(*mode);
    return out;
}

std::string normalize_server(std::string server) {
    // kubectl accepts "host:port" and means HTTPS.
    if (server.find("://") == std::string::npos) server = "https://" + server;
    return server;
}

std::string list_sources(const RawConfig& raw) {
    std::string s;
    for (const auto& src : raw.sources) {
        if (!s.empty()) s += ", ";
        s += src;
    }
    return s;
}

Result<KubeConfig> resolve_unsafe(const RawConfig& raw, const KubeConfigLoadOptions& options) {
    KubeConfig cfg;
    const std::string ctx_name = options.context ? *options.context : raw.current_context;
    if (ctx_name.empty())
        return fail(errc::invalid_config, "no current-context is set in kubeconfig " + list_sources(raw));
    auto ctx_it = raw.contexts.find(ctx_name);
    if (ctx_it == raw.contexts.end())
        return fail(errc::invalid_config, "context \"" + ctx_name + "\" not found in kubeconfig " + list_sources(raw));
    const Entry& ctx = ctx_it->second;
    Where ctx_where{ctx.source, "contexts[" + ctx_name + "].context"};
    cfg.context_name = ctx_name;

    auto cluster_name = get_string(ctx.body, "cluster", ctx_where);
    if (!cluster_name) return tl::unexpected(cluster_name.error());
    if (cluster_name->empty()) return tl::unexpected(ctx_where.error("cluster", "missing"));
    auto user_name = get_string(ctx.body, "user", ctx_where);
    if (!user_name) return tl::unexpected(user_name.error());
    auto ns = get_string(ctx.body, "namespace", ctx_where);
    if (!ns) return tl::unexpected(ns.error());
    if (options.namespace_name && !options.namespace_name->empty()) cfg.namespace_name = *options.namespace_name;
    else if (!ns->empty()) cfg.namespace_name = *ns;

    auto cl_it = raw.clusters.find(*cluster_name);
    if (cl_it == raw.clusters.end())
        return tl::unexpected(ctx_where.error("cluster", "cluster \"" + *cluster_name + "\" not found"));
    const Entry& cl = cl_it->second;
    Where cl_where{cl.source, "clusters[" + *cluster_name + "].cluster"};
    cfg.cluster_name = *cluster_name;
    auto server = get_string(cl.body, "server", cl_where);
    if (!server) return tl::unexpected(server.error());
    if (server->empty()) return tl::unexpected(cl_where.error("server", "missing"));
    cfg.server = normalize_server(std::move(*server));
    auto ca = load_pem(cl, cl_where, "certificate-authority", "certificate-authority-data", PemKind::certificates);
    if (!ca) return tl::unexpected(ca.error());
    cfg.certificate_authority_pem = std::move(*ca);
    auto insecure = get_bool(cl.body, "insecure-skip-tls-verify", cl_where);
    if (!insecure) return tl::unexpected(insecure.error());
    cfg.insecure_skip_tls_verify = *insecure;
    if (cfg.insecure_skip_tls_verify && !cfg.certificate_authority_pem.empty())
        return tl::unexpected(
            cl_where.error("insecure-skip-tls-verify",
                           "a certificate authority together with insecure-skip-tls-verify is not allowed"));
    auto sni = get_string(cl.body, "tls-server-name", cl_where);
    if (!sni) return tl::unexpected(sni.error());
    cfg.tls_server_name = std::move(*sni);
    auto proxy = get_string(cl.body, "proxy-url", cl_where);
    if (!proxy) return tl::unexpected(proxy.error());
    cfg.proxy_url = std::move(*proxy);

    if (user_name->empty()) return cfg;  // anonymous
    auto us_it = raw.users.find(*user_name);
    if (us_it == raw.users.end())
        return tl::unexpected(ctx_where.error("user", "user \"" + *user_name + "\" not found"));
    const Entry& us = us_it->second;
    Where us_where{us.source, "users[" + *user_name + "].user"};
    cfg.user_name = *user_name;
    auto cert = load_pem(us, us_where, "client-certificate", "client-certificate-data", PemKind::certificates);
    if (!cert) return tl::unexpected(cert.error());
    auto key = load_pem(us, us_where, "client-key", "client-key-data", PemKind::private_key);
    if (!key) return tl::unexpected(key.error());
    if (cert->empty() != key->empty()) {
        const char* missing = cert->empty() ? "client-certificate" : "client-key";
        return tl::unexpected(us_where.error(missing, "missing (client certificate and key must be given together)"));
    }
    cfg.client_certificate_pem = std::move(*cert);
    cfg.client_key_pem = std::move(*key);
    auto token = get_string(us.body, "token", us_where);
    if (!token) return tl::unexpected(token.error());
    cfg.token = std::move(*token);
    auto token_file = get_string(us.body, "tokenFile", us_where);
    if (!token_file) return tl::unexpected(token_file.error());
    if (!token_file->empty()) cfg.token_file = resolve_path(us.base_dir, *token_file).string();
    auto username = get_string(us.body, "username", us_where);
    if (!username) return tl::unexpected(username.error());
    auto password = get_string(us.body, "password", us_where);
    if (!password) return tl::unexpected(password.error());
    cfg.username = std::move(*username);
    cfg.password = std::move(*password);
    if ((!cfg.token.empty() || !cfg.token_file.empty()) && (!cfg.username.empty() || !cfg.password.empty()))
        return tl::unexpected(us_where.error("", "token and username/password cannot both be set"));
    YAML::Node exec = us.body["exec"];
    if (exec && !exec.IsNull()) {
        auto e = load_exec(us, exec, us_where);
        if (!e) return tl::unexpected(e.error());
        cfg.exec = std::move(*e);
    }
    return cfg;
}

Result<KubeConfig> resolve(const RawConfig& raw, const KubeConfigLoadOptions& options) {
    try {
        return resolve_unsafe(raw, options);
    } catch (const YAML::Exception& e) {
        return fail(errc::invalid_config, "kubeconfig " + list_sources(raw) + ": " + e.msg);
    } catch (const std::exception&) {
        return fail(errc::invalid_config, "kubeconfig " + list_sources(raw) + ": cannot be resolved");
    }
}

struct Candidates {
    std::vector<fs::path> paths;
    bool explicit_paths = false;  // named by the caller: a missing file is an error
};

Candidates candidate_paths(const KubeConfigLoadOptions& options) {
    Candidates c;
    if (!options.paths.empty()) {
        c.paths = options.paths;
        c.explicit_paths = true;
        return c;
    }
    const char* env = std::getenv("KUBECONFIG");
    if (env != nullptr && *env != '\0') {
        std::set<std::string> seen;
        std::string_view list(env);
        while (!list.empty()) {
            auto colon = list.find(':');
            std::string item(list.substr(0, colon));
            list = colon == std::string_view::npos ? std::string_view() : list.substr(colon + 1);
            if (item.empty() || !seen.insert(item).second) continue;
            c.paths.emplace_back(item);
        }
        return c;
    }
    const char* home = std::getenv("HOME");
    if (home != nullptr && *home != '\0') c.paths.push_back(fs::path(home) / ".kube" / "config");
    return c;
}

bool path_exists(const fs::path& p) {
    std::error_code ec;
    return fs::exists(fs::symlink_status(p, ec)) && fs::exists(p, ec);
}

}  // namespace

KubeConfig KubeConfig::from_url(std::string server, std::string token, std::string namespace_name) {
    KubeConfig c;
    c.server = std::move(server);
    c.token = std::move(token);
    c.namespace_name = namespace_name.empty() ? std::string("default") : std::move(namespace_name);
    return c;
}

Result<KubeConfig> parse_kubeconfig(std::string_view yaml, std::string_view source,
                                    const std::filesystem::path& base_dir, const KubeConfigLoadOptions& options) {
    RawConfig raw;
    if (auto r = merge_document(raw, yaml, std::string(source), base_dir); !r) return tl::unexpected(r.error());
    return resolve(raw, options);
}

Result<KubeConfig> load_kubeconfig(const KubeConfigLoadOptions& options) {
    const Candidates candidates = candidate_paths(options);
    RawConfig raw;
    std::string tried;
    bool any = false;
    for (const auto& p : candidates.paths) {
        if (!tried.empty()) tried += ", ";
        tried += p.string();
        if (!path_exists(p)) {
            if (candidates.explicit_paths)
                return fail(errc::invalid_config, "kubeconfig " + p.string() + ": file does not exist");
            continue;  // KUBECONFIG entries and ~/.kube/config may be absent
        }
        auto content = read_file(p);
        if (!content)
            return fail(errc::invalid_config, "kubeconfig " + p.string() + ": cannot read: " + content.error().message);
        std::error_code ec;
        fs::path abs = fs::absolute(p, ec);
        if (ec) abs = p;
        if (auto r = merge_document(raw, *content, p.string(), abs.parent_path()); !r) return tl::unexpected(r.error());
        any = true;
    }
    if (!any) {
        std::string m = "no configuration has been provided";
        if (!tried.empty()) m += " (no kubeconfig file found: " + tried + ")";
        return fail(errc::invalid_config, std::move(m));
    }
    return resolve(raw, options);
}

Result<KubeConfig> load_in_cluster_config(const std::filesystem::path& service_account_dir) {
    const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
    const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
    if (host == nullptr || *host == '\0' || port == nullptr || *port == '\0')
        return fail(errc::invalid_config,
                    "not running in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set");
    KubeConfig cfg;
    std::string h(host);
    if (h.find(':') != std::string::npos && h.front() != '[') h = "[" + h + "]";
    cfg.server = "https://" + h + ":" + port;
    cfg.context_name = "in-cluster";
    cfg.cluster_name = "in-cluster";

    const fs::path token_path = service_account_dir / "token";
    auto token = read_file(token_path);
    if (!token)
        return fail(errc::invalid_config,
                    "in-cluster config: cannot read token " + token_path.string() + ": " + token.error().message);
    if (trim(*token).empty())
        return fail(errc::invalid_config, "in-cluster config: token file " + token_path.string() + " is empty");
    // Only the path is kept: the kubelet rotates the token and the client re-reads it.
    cfg.token_file = token_path.string();

    const fs::path ca_path = service_account_dir / "ca.crt";
    if (path_exists(ca_path)) {
        auto ca = read_file(ca_path);
        if (!ca)
            return fail(errc::invalid_config,
                        "in-cluster config: cannot read " + ca_path.string() + ": " + ca.error().message);
        if (!proto::pem_has_certificates(*ca))
            return fail(errc::invalid_config,
                        "in-cluster config: " + ca_path.string() + " is not a valid PEM certificate");
        cfg.certificate_authority_pem = std::move(*ca);
    }

    const char* pod_ns = std::getenv("POD_NAMESPACE");
    if (pod_ns != nullptr && *pod_ns != '\0') {
        cfg.namespace_name = pod_ns;
    } else if (auto ns = read_file(service_account_dir / "namespace"); ns && !trim(*ns).empty()) {
        cfg.namespace_name = trim(std::move(*ns));
    }
    return cfg;
}

Result<KubeConfig> load_default_config(const KubeConfigLoadOptions& options) {
    const Candidates candidates = candidate_paths(options);
    bool any = false;
    for (const auto& p : candidates.paths) any = any || path_exists(p);
    if (!any && !candidates.explicit_paths) {
        const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
        if (host != nullptr && *host != '\0') {
            auto cfg = load_in_cluster_config();
            if (cfg && options.namespace_name && !options.namespace_name->empty())
                cfg->namespace_name = *options.namespace_name;
            return cfg;
        }
    }
    return load_kubeconfig(options);
}

}  // namespace kubesandbox
