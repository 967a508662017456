// kubesandbox: command-line front end of the raw-mode provider (create, list, exec, cp, delete,
// cleanup, pool, and the file commands of file_commands.hpp). Arguments go to the sandbox as argv
// or script arguments, never through a local shell.
// Exit codes: 0 ok, 1 error (typed error named on stderr), 2 usage; `exec` returns the command's.
#include "agent_connection.hpp"
#include "cli_args.hpp"
#include "copy_command.hpp"
#include "file_commands.hpp"

#include <kubesandbox/agent_sandbox_provider.hpp>
#include <kubesandbox/kube_config.hpp>
#include <kubesandbox/local_cluster.hpp>
#include <kubesandbox/raw_provider.hpp>
#include <kubesandbox/router_sandbox.hpp>

#include "files/text.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace asio = boost::asio;
namespace json = boost::json;
using namespace kubesandbox;
using kubesandbox::cli::Args;
using kubesandbox::cli::parse;
using kubesandbox::cli::parse_kv;
using kubesandbox::cli::usage_text;
using kubesandbox::cli::UsageError;

namespace {

void print_json(const json::value& v) { std::cout << json::serialize(v) << "\n"; }

// JSON strings are UTF-8: text that is not goes with U+FFFD in place of the bad bytes, and
// exactly, base64-encoded, under "<key>_base64".
void put_text(json::object& o, const std::string& key, const std::string& text) {
    if (files::valid_utf8(text)) {
        o[key] = text;
        return;
    }
    o[key] = files::replace_invalid_utf8(text);
    o[key + "_base64"] = files::base64_encode(text);
}

int report(const Error& e) {
    std::cerr << "kubesandbox: error: " << e.describe() << "\n";
    return 1;
}

json::object to_json(const SandboxInfo& i) {
    json::object o;
    o["id"] = i.id;
    o["namespace"] = i.namespace_name;
    o["pod_name"] = i.pod_name;
    o["status"] = i.status;
    json::object l;
    for (const auto& [k, v] : i.labels) l[k] = v;
    o["labels"] = std::move(l);
    o["created_at"] = i.created_at;
    o["last_activity"] = i.last_activity;
    return o;
}

// What the commands print about the provider's settings.
struct ModeInfo {
    std::chrono::seconds startup_timeout;
    std::chrono::seconds default_exec_timeout;
    std::size_t max_output_bytes;
};

// The sandbox's name after "<namespace>/" in its id().
std::string name_of(const Sandbox& sandbox) {
    const std::string& id = sandbox.id();
    return id.substr(id.find('/') + 1);
}

// Writes all of `data` to `fd`, blocking; false on an error, whose errno is kept in `error`.
bool write_all(int fd, std::string_view data, int& error) {
    while (!data.empty()) {
        ssize_t n = ::write(fd, data.data(), data.size());
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            error = n < 0 ? errno : EIO;
            return false;
        }
        data.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
}

asio::awaitable<int> run_command(SandboxProvider& provider, const ModeInfo& mode, Args& a) {
    const std::string& cmd = a.command;
    if (cli::is_file_command(cmd)) {
        auto sb = co_await provider.reconnect(a.rest.at(0));
        if (!sb) co_return report(sb.error());
        co_return co_await cli::run_file_command(**sb, a.file);
    }
    if (cmd == "create") {
        if (!a.rest.empty()) throw UsageError{"create takes no positional arguments"};
        GetOrCreateOptions o;
        if (!a.id.empty()) o.sandbox_id = a.id;
        for (auto& [k, v] : a.labels) o.labels[k] = v;
        o.ttl_seconds = a.ttl;
        o.ttl_idle_seconds = a.ttl_idle;
        std::cerr << "kubesandbox: waiting for the sandbox to become ready (up to " << mode.startup_timeout.count()
                  << " s)...\n";
        auto sb = co_await provider.get_or_create(o);
        if (!sb) co_return report(sb.error());
        std::string id = a.id.empty() ? name_of(**sb) : a.id;
        if (a.json) {
            json::object out;
            out["id"] = id;
            out["namespace"] = (*sb)->id().substr(0, (*sb)->id().find('/'));
            if (auto* pod = dynamic_cast<PodExecSandbox*>(sb->get())) out["pod_name"] = pod->pod_name();
            if (auto* routed = dynamic_cast<RouterSandbox*>(sb->get()))
                out["pod_name"] = routed->options().sandbox_name;
            out["sandbox_id"] = (*sb)->id();
            print_json(out);
        } else {
            std::cout << id << "\n";
        }
        co_return 0;
    }
    if (cmd == "list") {
        if (!a.rest.empty()) throw UsageError{"list takes no positional arguments"};
        ListSandboxesOptions lo;
        if (!a.selector.empty()) {
            std::stringstream ss(a.selector);
            std::string part;
            while (std::getline(ss, part, ',')) {
                auto kv = parse_kv("-l", part);
                lo.labels[kv.first] = kv.second;
            }
        }
        lo.status = a.status;
        lo.limit = 100;
        std::vector<SandboxInfo> all;
        for (;;) {
            auto page = co_await provider.list(lo);
            if (!page) co_return report(page.error());
            for (auto& i : page->items) all.push_back(std::move(i));
            if (page->next_cursor.empty()) break;
            lo.cursor = page->next_cursor;
        }
        if (a.json) {
            json::array arr;
            for (const auto& i : all) arr.push_back(to_json(i));
            json::object out;
            out["items"] = std::move(arr);
            print_json(out);
        } else {
            std::printf("%-40s %-20s %-10s %s\n", "ID", "NAMESPACE", "STATUS", "CREATED");
            for (const auto& i : all)
                std::printf("%-40s %-20s %-10s %s\n", i.id.c_str(), i.namespace_name.c_str(), i.status.c_str(),
                            i.created_at.c_str());
        }
        co_return 0;
    }
    if (cmd == "exec") {
        std::vector<std::string> command = a.argv;
        if (a.rest.empty()) throw UsageError{"exec needs a sandbox ID"};
        for (std::size_t i = 1; i < a.rest.size(); ++i)
            command.insert(command.begin() + static_cast<long>(i - 1), a.rest[i]);
        if (command.empty()) throw UsageError{"exec needs a command after --"};
        auto sb = co_await provider.reconnect(a.rest[0]);
        if (!sb) co_return report(sb.error());
        std::optional<std::chrono::seconds> timeout;
        if (a.timeout) timeout = std::chrono::seconds(*a.timeout);
        auto* pod = dynamic_cast<PodExecSandbox*>(sb->get());
        if (!pod) {
            // Other modes run shell commands: the argv is quoted into one.
            std::string line;
            for (const auto& arg : command) line += (line.empty() ? "" : " ") + files::shell_quote(arg);
            if (!a.json) {
                // stdout and stderr apart, each written once the sandbox hands it over.
                int write_error = 0;
                OutputSink print = [&write_error](int stream, std::string_view data) -> asio::awaitable<bool> {
                    co_return write_all(stream == 2 ? STDERR_FILENO : STDOUT_FILENO, data, write_error);
                };
                auto r = co_await (*sb)->execute(line, timeout, std::move(print));
                if (!r && r.error().is(errc::cancelled) && write_error != 0) {
                    if (write_error == EPIPE) co_return 128 + SIGPIPE;
                    std::cerr << "kubesandbox: cannot write the output: " << std::strerror(write_error) << "\n";
                    co_return 1;
                }
                if (!r) co_return report(r.error());
                if (!r->output.empty())
                    std::cerr << "kubesandbox: " << r->output << "; its processes were killed\n";  // a timeout
                if (r->truncated)
                    std::cerr << "kubesandbox: output truncated at " << mode.max_output_bytes << " bytes\n";
                if (!r->exit_code) {
                    std::cerr << "kubesandbox: exit code unknown (no status from the sandbox)\n";
                    co_return 1;
                }
                co_return *r->exit_code & 0xff;
            }
            auto r = co_await (*sb)->execute(line, timeout);
            if (!r) co_return report(r.error());
            {
                json::object out;
                put_text(out, "output", r->output);
                if (r->exit_code) out["exit_code"] = *r->exit_code;
                else out["exit_code"] = nullptr;
                out["truncated"] = r->truncated;
                out["timed_out"] = r->exit_code == 124 && r->output.rfind("Command timed out after ", 0) == 0;
                print_json(out);
            }
            if (!r->exit_code) co_return 1;
            co_return *r->exit_code & 0xff;
        }
        std::string no_stdin;
        if (!a.json) {
            // Printed as it arrives, nothing kept: `exec ID -- cat big > file` runs in constant
            // memory. A blocking write is the back-pressure: the next piece is read after it.
            int write_error = 0;
            OutputSink print = [&write_error](int stream, std::string_view data) -> asio::awaitable<bool> {
                co_return write_all(stream == 2 ? STDERR_FILENO : STDOUT_FILENO, data, write_error);
            };
            auto r = co_await pod->run(command, no_stdin, timeout, std::move(print));
            if (!r) co_return report(r.error());
            if (r->stopped) {
                if (write_error == EPIPE) co_return 128 + SIGPIPE;  // what a shell reports for `... | head`
                std::cerr << "kubesandbox: cannot write the output: " << std::strerror(write_error) << "\n";
                co_return 1;
            }
            if (r->timed_out) std::cerr << "kubesandbox: command timed out; its processes were killed\n";
            if (!r->exit_code) {
                std::cerr << "kubesandbox: exit code unknown (no status from the API server)\n";
                co_return 1;
            }
            co_return *r->exit_code & 0xff;
        }
        auto r = co_await pod->run(command, no_stdin, timeout);
        if (!r) co_return report(r.error());
        {
            // The library's ExecuteResponse shape (output = stdout, then "\n" + stderr), plus
            // the streams apart.
            std::string output = r->stdout_data;
            if (!output.empty() && !r->stderr_data.empty()) output += '\n';
            output += r->stderr_data;
            if (r->timed_out)
                output = "Command timed out after " +
                         std::to_string(timeout ? timeout->count() : mode.default_exec_timeout.count()) + " seconds";
            json::object out;
            put_text(out, "output", output);
            put_text(out, "stdout", r->stdout_data);
            put_text(out, "stderr", r->stderr_data);
            if (r->exit_code) out["exit_code"] = *r->exit_code;
            else out["exit_code"] = nullptr;
            out["truncated"] = r->truncated;
            out["timed_out"] = r->timed_out;
            print_json(out);
        }
        if (!r->exit_code) {
            std::cerr << "kubesandbox: exit code unknown (no status from the API server)\n";
            co_return 1;
        }
        co_return *r->exit_code & 0xff;
    }
    if (cmd == "cp") {
        if (a.rest.size() != 2) throw UsageError{"cp needs SOURCE and DESTINATION"};
        auto split = [](const std::string& s) -> std::optional<std::pair<std::string, std::string>> {
            auto c = s.find(':');
            if (c == std::string::npos || c == 0 || c + 1 >= s.size() || s[c + 1] != '/') return std::nullopt;
            return std::make_pair(s.substr(0, c), s.substr(c + 1));
        };
        auto src = split(a.rest[0]);
        auto dst = split(a.rest[1]);
        if (src.has_value() == dst.has_value()) throw UsageError{"cp: exactly one side must be ID:/absolute/path"};
        auto sb = co_await provider.reconnect(src ? src->first : dst->first);
        if (!sb) co_return report(sb.error());
        // Not a conditional expression: g++ 12 ends a co_await's result early there.
        std::optional<std::string> failed;
        if (dst) failed = co_await cli::copy_in(**sb, a.rest[0], dst->second);
        else failed = co_await cli::copy_out(**sb, src->second, a.rest[1]);
        if (failed) {
            std::cerr << "kubesandbox: error: " << *failed << "\n";
            co_return 1;
        }
        json::object out;
        out["path"] = dst ? dst->second : src->second;
        out["error"] = nullptr;
        if (a.json) print_json(out);
        co_return 0;
    }
    if (cmd == "delete") {
        if (a.rest.size() != 1) throw UsageError{"delete needs exactly one sandbox ID"};
        auto r = co_await provider.delete_sandbox(a.rest[0]);
        if (!r) co_return report(r.error());
        if (a.json) {
            json::object out;
            out["id"] = a.rest[0];
            out["found"] = *r;
            print_json(out);
        } else if (*r) {
            std::cout << "deleted " << a.rest[0] << "\n";
        } else {
            std::cerr << "kubesandbox: " << a.rest[0] << " not found (already deleted)\n";
        }
        co_return 0;
    }
    if (cmd == "cleanup") {
        if (!a.rest.empty()) throw UsageError{"cleanup takes no positional arguments"};
        std::optional<std::chrono::seconds> idle;
        if (a.max_idle) idle = std::chrono::seconds(*a.max_idle);
        auto r = co_await provider.cleanup(idle);
        if (!r) co_return report(r.error());
        if (a.json) {
            json::object out;
            json::array deleted;
            for (const auto& d : r->deleted) deleted.emplace_back(d);
            out["deleted"] = std::move(deleted);
            out["kept"] = r->kept;
            json::array errors;
            for (const auto& e : r->errors) {
                json::object eo;
                eo["id"] = e.id;
                eo["error"] = e.error.describe();
                errors.push_back(std::move(eo));
            }
            out["errors"] = std::move(errors);
            print_json(out);
        } else {
            for (const auto& d : r->deleted) std::cout << "deleted " << d << "\n";
            std::cout << "kept " << r->kept << "\n";
            for (const auto& e : r->errors)
                std::cerr << "kubesandbox: error: " << e.id << ": " << e.error.describe() << "\n";
        }
        co_return r->errors.empty() ? 0 : 1;
    }
    if (cmd == "pool") {
        if (!a.rest.empty()) throw UsageError{"pool takes no positional arguments"};
        if (a.fill) {
            auto f = co_await provider.ensure_warm_pool();
            if (!f) co_return report(f.error());
        }
        auto r = co_await provider.pool_status();
        if (!r) co_return report(r.error());
        if (a.json) {
            json::object out;
            out["available"] = r->available;
            out["active"] = r->active;
            out["total"] = r->total;
            out["target"] = r->target;
            print_json(out);
        } else {
            std::cout << "available " << r->available << "\nactive " << r->active << "\ntotal " << r->total
                      << "\ntarget " << r->target << "\n";
        }
        co_return 0;
    }
    throw UsageError{"unknown command \"" + cmd + "\""};
}

}  // namespace

int main(int argc, char** argv) {
    // A closed stdout (`exec ... | head`) is an EPIPE to report, not a signal that kills us.
    std::signal(SIGPIPE, SIG_IGN);
    Args a;
    try {
        a = parse(argc, argv);
    } catch (const UsageError& e) {
        std::cerr << "kubesandbox: " << e.message << "\n\n" << usage_text;
        return 2;
    }
    if (a.command == "help") {
        std::cout << usage_text;
        return 0;
    }
    if (a.command.empty()) {
        std::cerr << usage_text;
        return 2;
    }
    if (a.command == "write") {
        auto in = cli::read_all(STDIN_FILENO);
        if (!in) {
            std::cerr << "kubesandbox: cannot read stdin\n";
            return 1;
        }
        a.file.input = std::move(*in);
    }

    std::filesystem::path local_dir;
    struct RemoveDir {
        std::filesystem::path& p;
        ~RemoveDir() {
            std::error_code ec;
            if (!p.empty()) std::filesystem::remove_all(p, ec);
        }
    } remove_local_dir{local_dir};
    std::unique_ptr<LocalCluster> cluster;
    KubeConfig kc;
    if (a.local) {
        // Pods run as other uids: the data directory must be reachable by them (not 0700).
        char tmpl[] = "/tmp/kubesandbox-cli-XXXXXX";
        if (!::mkdtemp(tmpl)) {
            std::cerr << "kubesandbox: error: cannot create a temporary directory\n";
            return 1;
        }
        local_dir = tmpl;
        std::filesystem::permissions(local_dir, std::filesystem::perms(0755));
        LocalClusterOptions lopts;
        lopts.data_dir = local_dir;
        auto c = LocalCluster::start(lopts);
        if (!c) return report(c.error());
        cluster = std::move(*c);
        kc = cluster->kube_config(a.namespace_name.empty() ? "default" : a.namespace_name);
    } else {
        KubeConfigLoadOptions lo;
        if (!a.kubeconfig.empty()) lo.paths.push_back(a.kubeconfig);
        if (!a.context.empty()) lo.context = a.context;
        if (!a.namespace_name.empty()) lo.namespace_name = a.namespace_name;
        auto loaded = a.kubeconfig.empty() ? load_default_config(lo) : load_kubeconfig(lo);
        if (!loaded) return report(loaded.error());
        kc = std::move(*loaded);
    }
    a.config.namespace_name = a.namespace_name.empty() ? kc.namespace_name : a.namespace_name;
    if (a.config.namespace_name.empty()) a.config.namespace_name = "default";

    asio::io_context ioc;
    std::shared_ptr<SandboxProvider> provider;
    ModeInfo mode{a.config.startup_timeout, a.config.default_exec_timeout, a.config.max_output_bytes};
    if (a.mode == "agent-sandbox") {
        cli::AgentConnectionFlags flags;
        flags.connection = a.connection;
        flags.router_url = a.router_url;
        flags.router_token = a.router_token;
        flags.gateway_name = a.gateway_name;
        flags.gateway_namespace = a.gateway_namespace;
        flags.router_service = a.router_service;
        flags.kubeconfig = a.kubeconfig;
        flags.context = a.context;
        KubeClient kube(ioc.get_executor(), kc);
        if (auto chosen = cli::choose_agent_connection(flags, cluster.get(), kube, a.agent); !chosen)
            return report(chosen.error());
        a.agent.namespace_name = a.config.namespace_name;
        a.agent.ready_timeout = a.config.startup_timeout;
        mode = ModeInfo{a.agent.ready_timeout, a.agent.default_exec_timeout, a.agent.max_output_bytes};
        provider = std::make_shared<AgentSandboxProvider>(KubeClient(ioc.get_executor(), kc), a.agent);
    } else {
        provider = std::make_shared<RawProvider>(KubeClient(ioc.get_executor(), kc), a.config);
    }
    int code = 1;
    bool done = false;
    std::optional<std::string> usage;
    auto main_task = [&]() -> asio::awaitable<void> {
        try {
            code = co_await run_command(*provider, mode, a);
        } catch (const UsageError& e) {
            usage = e.message;
            code = 2;
        }
    };
    asio::co_spawn(ioc, main_task(), [&](std::exception_ptr e) {
        done = true;
        if (e) {
            try {
                std::rethrow_exception(e);
            } catch (const std::exception& ex) {
                std::cerr << "kubesandbox: error: " << ex.what() << "\n";
            }
            code = 1;
        }
    });
    while (!done && ioc.run_one() > 0) {}
    // Objects bound to ioc (the router connection's pool) go before it does.
    provider.reset();
    a.agent.connection.reset();
    // Reconnects already wrote last-activity (debouncing the exec's own patch); a warm-pool
    // refill started by a claim is abandoned: its pods finish starting in the cluster.
    ioc.stop();
    if (usage) {
        std::cerr << "kubesandbox: " << *usage << "\n\n" << usage_text;
        return 2;
    }
    return code;
}
