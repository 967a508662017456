// kubesandbox: command-line front end of the raw-mode provider (create, list, exec, cp, delete,
// cleanup, pool, and the file commands of file_commands.hpp). Arguments go to the sandbox as argv
// or script arguments, never through a local shell.
// Exit codes: 0 ok, 1 error (typed error named on stderr), 2 usage; `exec` returns the command's.
#include "agent_connection.hpp"
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
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace asio = boost::asio;
namespace json = boost::json;
using namespace kubesandbox;

namespace {

constexpr const char* usage_text =
    "usage: kubesandbox [global options] COMMAND [options]\n"
    "\n"
    "Commands:\n"
    "  create [--image I] [--id ID] [--label K=V]... [--ttl S] [--ttl-idle S]\n"
    "                          create (or reconnect to) a sandbox; prints its id on stdout\n"
    "  list [-l K=V[,K=V]] [--status S]   list sandboxes (all pages)\n"
    "  exec ID [--timeout S] -- CMD ARGS...\n"
    "                          run CMD (no shell) in the sandbox; its stdout and stderr on ours as\n"
    "                          they arrive (raw mode: uncapped, constant memory) and its exit\n"
    "                          code as ours (124 on timeout)\n"
    "  cp LOCAL ID:PATH | cp ID:PATH LOCAL   copy a file in or out (PATH absolute)\n"
    "  ls ID PATH              list a folder\n"
    "  read ID PATH [--offset N] [--limit N]   numbered lines [N+1, N+limit] (default 0, 2000)\n"
    "  write ID PATH           write stdin to PATH (parents created, file replaced)\n"
    "  edit ID PATH OLD NEW [--replace-all]\n"
    "  edit ID PATH --old-file F --new-file F [--replace-all]\n"
    "                          replace OLD (exactly once unless --replace-all) by NEW\n"
    "  glob ID PATTERN [--path P]   files matching PATTERN (*, ?, [..], {a,b}, **) below P (/)\n"
    "  grep ID PATTERN [--path P] [--glob G] [--max-count N]\n"
    "                          lines holding PATTERN (literal text) in files below P (.)\n"
    "  rm ID PATH              remove a file or folder\n"
    "  delete ID               delete a sandbox (exit 0 also when it is already gone)\n"
    "  cleanup [--max-idle S]  delete sandboxes whose TTL or idle time has expired\n"
    "  pool [--fill]           warm pool status (--fill creates the missing warm pods)\n"
    "\n"
    "Modes:\n"
    "  --mode raw              (default) sandboxes are hardened Pods, reached through pods/exec\n"
    "  --mode agent-sandbox    sandboxes are agent-sandbox SandboxClaims, reached through the\n"
    "                          sandbox router (needs the agent-sandbox controller and router)\n"
    "  --warm-pool NAME        agent-sandbox: the SandboxWarmPool claims name (default python-runtime)\n"
    "  --template NAME         agent-sandbox: name a SandboxTemplate instead (older controllers)\n"
    "  --router-url URL        agent-sandbox: the router (default $KUBESANDBOX_ROUTER_URL, then the\n"
    "                          URL kubesandbox-local wrote beside its kubeconfig as <kubeconfig>.router)\n"
    "  --router-token TOKEN    agent-sandbox: bearer token for the router (default\n"
    "                          $KUBESANDBOX_ROUTER_TOKEN, then the .router file)\n"
    "  --connection direct|in-cluster|gateway|tunnel|kubectl-tunnel|pod-tunnel|pod-direct\n"
    "                          agent-sandbox: how the router is reached: at its URL (direct, default);\n"
    "                          at its cluster DNS name, sandbox-router-svc.agent-sandbox-system:8080\n"
    "                          unless --router-url or a local cluster names it (in-cluster); at the\n"
    "                          address a Gateway publishes (gateway); through a port-forward to its\n"
    "                          Service via the API server (tunnel: no kubectl, no local port) or via a\n"
    "                          kubectl port-forward child (kubectl-tunnel); or no router, a port-forward\n"
    "                          to each sandbox's pod (pod-tunnel) or, inside the cluster, to its Service\n"
    "                          or pod IP (pod-direct)\n"
    "  --router-service NS/NAME[:PORT]\n"
    "                          tunnel, kubectl-tunnel: the router's Service (default\n"
    "                          agent-sandbox-system/sandbox-router-svc:8080)\n"
    "  --gateway NAME          gateway: the Gateway (default sandbox-router-gateway, as the local\n"
    "                          cluster names its own)\n"
    "  --gateway-namespace NS  gateway: its namespace (default default)\n"
    "\n"
    "Global options:\n"
    "  --kubeconfig PATH       kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster)\n"
    "  --context NAME          kubeconfig context\n"
    "  -n, --namespace NS      namespace (default: the context's)\n"
    "  --local                 start the embedded local cluster inside this process for the duration of\n"
    "                          the command. Its state vanishes when the command exits, so this only suits\n"
    "                          a single self-contained command; run kubesandbox-local and use its\n"
    "                          kubeconfig for anything longer.\n"
    "  --image IMAGE           sandbox image (default python:3.12-slim)\n"
    "  --warm-pool-size N      warm pool target for create/pool\n"
    "  --namespace-per-sandbox give every sandbox its own namespace\n"
    "  --no-block-network      do not create the deny-all NetworkPolicy\n"
    "  --startup-timeout S     readiness timeout for create (default 120)\n"
    "  --json                  print the library result as one JSON document (output that is not\n"
    "                          UTF-8 also comes exactly, base64-encoded, as <field>_base64)\n"
    "  -h, --help              this help\n"
    "\n"
    "Exit codes: 0 success, 1 error, 2 usage error; exec: the command's exit code; file commands:\n"
    "1 when the result has an error (printed on stderr, or in the --json document).\n";

struct UsageError {
    std::string message;
};

struct Args {
    std::string kubeconfig, context, namespace_name;
    bool local = false, json = false;
    RawProviderOptions config;
    std::string mode{"raw"};
    AgentSandboxProviderOptions agent;
    std::string router_url, router_token, connection{"direct"};
    std::string gateway_name{"sandbox-router-gateway"}, gateway_namespace{"default"};
    std::string router_service{"agent-sandbox-system/sandbox-router-svc:8080"};
    std::string command;
    std::vector<std::string> rest;  // positional arguments of the command
    // command options
    std::string id;
    std::vector<std::pair<std::string, std::string>> labels;
    std::optional<std::int64_t> ttl, ttl_idle, timeout, max_idle;
    std::optional<std::string> status;
    std::string selector;
    bool fill = false;
    std::vector<std::string> argv;  // exec command after --
    cli::FileCommand file;          // file commands' options
};

std::int64_t parse_number(const std::string& flag, const std::string& v) {
    if (v.empty() || v.size() > 12 || v.find_first_not_of("0123456789") != std::string::npos)
        throw UsageError{flag + " needs a non-negative integer, got \"" + v + "\""};
    return std::stoll(v);
}

std::pair<std::string, std::string> parse_kv(const std::string& flag, const std::string& v) {
    auto eq = v.find('=');
    if (eq == std::string::npos || eq == 0) throw UsageError{flag + " needs KEY=VALUE, got \"" + v + "\""};
    return {v.substr(0, eq), v.substr(eq + 1)};
}

Args parse(int argc, char** argv) {
    Args a;
    a.config.namespace_name.clear();
    for (int i = 1; i < argc; ++i) {
        std::string s = argv[i];
        auto value = [&]() -> std::string {
            auto eq = s.find('=');
            if (s.rfind("--", 0) == 0 && eq != std::string::npos) {
                std::string v = s.substr(eq + 1);
                s = s.substr(0, eq);
                return v;
            }
            if (i + 1 >= argc) throw UsageError{s + " needs a value"};
            return argv[++i];
        };
        std::string flag = s.substr(0, s.find('='));
        if (s == "--") {
            for (++i; i < argc; ++i) a.argv.push_back(argv[i]);
            break;
        } else if (s == "-h" || s == "--help") {
            a.command = "help";
            return a;
        } else if (flag == "--kubeconfig") a.kubeconfig = value();
        else if (flag == "--context") a.context = value();
        else if (flag == "--namespace" || s == "-n") a.namespace_name = value();
        else if (s == "--local") a.local = true;
        else if (s == "--json") a.json = true;
        else if (flag == "--image") a.config.image = value();
        else if (flag == "--mode") a.mode = value();
        else if (flag == "--warm-pool") a.agent.warm_pool = value();
        else if (flag == "--template") a.agent.template_name = value();
        else if (flag == "--router-url") a.router_url = value();
        else if (flag == "--router-token") a.router_token = value();
        else if (flag == "--connection") a.connection = value();
        else if (flag == "--gateway") a.gateway_name = value();
        else if (flag == "--gateway-namespace") a.gateway_namespace = value();
        else if (flag == "--router-service") a.router_service = value();
        else if (flag == "--warm-pool-size")
            a.config.warm_pool_size = static_cast<int>(parse_number("--warm-pool-size", value()));
        else if (s == "--namespace-per-sandbox") a.config.namespace_per_sandbox = true;
        else if (s == "--no-block-network") a.config.block_network = false;
        else if (flag == "--startup-timeout")
            a.config.startup_timeout = std::chrono::seconds(parse_number("--startup-timeout", value()));
        else if (flag == "--id") a.id = value();
        else if (flag == "--label") a.labels.push_back(parse_kv("--label", value()));
        else if (flag == "--ttl") a.ttl = parse_number("--ttl", value());
        else if (flag == "--ttl-idle") a.ttl_idle = parse_number("--ttl-idle", value());
        else if (flag == "--timeout") a.timeout = parse_number("--timeout", value());
        else if (flag == "--max-idle") a.max_idle = parse_number("--max-idle", value());
        else if (flag == "--status") a.status = value();
        else if (flag == "--selector" || s == "-l") a.selector = value();
        else if (s == "--fill") a.fill = true;
        else if (flag == "--offset") a.file.offset = parse_number("--offset", value());
        else if (flag == "--limit") a.file.limit = parse_number("--limit", value());
        else if (flag == "--max-count") a.file.max_count = parse_number("--max-count", value());
        else if (flag == "--path") a.file.path = value();
        else if (flag == "--glob") a.file.glob = value();
        else if (flag == "--old-file") a.file.old_file = value();
        else if (flag == "--new-file") a.file.new_file = value();
        else if (s == "--replace-all") a.file.replace_all = true;
        else if (s.size() > 1 && s[0] == '-') throw UsageError{"unknown option " + s};
        else if (a.command.empty()) a.command = s;
        else a.rest.push_back(s);
    }
    static const char* known[] = {"create", "list", "exec", "cp", "delete", "cleanup", "pool"};
    bool ok = a.command.empty();
    for (const char* k : known) ok = ok || a.command == k;
    ok = ok || cli::is_file_command(a.command);
    if (!ok) throw UsageError{"unknown command \"" + a.command + "\""};
    if (a.mode != "raw" && a.mode != "agent-sandbox") throw UsageError{"--mode must be raw or agent-sandbox"};
    if (cli::is_file_command(a.command)) {
        // Everything after the ID belongs to the command: `--` lets OLD/NEW start with a dash.
        a.file.name = a.command;
        a.file.json = a.json;
        a.file.args.assign(a.rest.begin() + (a.rest.empty() ? 0 : 1), a.rest.end());
        a.file.args.insert(a.file.args.end(), a.argv.begin(), a.argv.end());
        if (a.rest.empty()) throw UsageError{a.command + " needs a sandbox ID"};
        if (auto problem = cli::prepare_file_command(a.file)) throw UsageError{*problem};
    }
    return a;
}

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
            auto r = co_await (*sb)->execute(line, timeout);
            if (!r) co_return report(r.error());
            if (a.json) {
                json::object out;
                put_text(out, "output", r->output);
                if (r->exit_code) out["exit_code"] = *r->exit_code;
                else out["exit_code"] = nullptr;
                out["truncated"] = r->truncated;
                out["timed_out"] = r->exit_code == 124 && r->output.rfind("Command timed out after ", 0) == 0;
                print_json(out);
            } else {
                std::fwrite(r->output.data(), 1, r->output.size(), stdout);
                std::fflush(stdout);
                if (r->truncated)
                    std::cerr << "kubesandbox: output truncated at " << mode.max_output_bytes << " bytes\n";
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
        json::object out;
        if (dst) {
            auto data = cli::read_local_file(a.rest[0]);
            if (!data) {
                std::cerr << "kubesandbox: error: cannot read " << a.rest[0] << "\n";
                co_return 1;
            }
            std::vector<std::pair<std::string, std::string>> files;
            files.emplace_back(dst->second, std::move(*data));
            auto r = co_await (*sb)->upload_files(std::move(files));
            if (!r) co_return report(r.error());
            if (r->size() != 1 || (*r)[0].error) {
                std::string why = r->empty() ? "no result" : (*(*r)[0].error);
                std::cerr << "kubesandbox: error: upload " << dst->second << ": " << why << "\n";
                co_return 1;
            }
            out["path"] = dst->second;
            out["error"] = nullptr;
        } else {
            std::vector<std::string> paths{src->second};
            auto r = co_await (*sb)->download_files(std::move(paths));
            if (!r) co_return report(r.error());
            if (r->size() != 1 || (*r)[0].error || !(*r)[0].content) {
                std::string why = (r->empty() || !(*r)[0].error) ? "no content" : (*(*r)[0].error);
                std::cerr << "kubesandbox: error: download " << src->second << ": " << why << "\n";
                co_return 1;
            }
            std::ofstream f(a.rest[1], std::ios::binary | std::ios::trunc);
            f.write((*r)[0].content->data(), static_cast<std::streamsize>((*r)[0].content->size()));
            f.close();
            if (!f) {
                std::cerr << "kubesandbox: error: cannot write " << a.rest[1] << "\n";
                co_return 1;
            }
            out["path"] = src->second;
            out["error"] = nullptr;
        }
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
        std::string in((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
        a.file.input = std::move(in);
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
