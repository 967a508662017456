#include "cli_args.hpp"

#include <chrono>

namespace kubesandbox::cli {

const char* const usage_text =
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
    "  --template NAME         agent-sandbox: claim from this SandboxTemplate, through the warm pool\n"
    "                          that serves it (by name on clusters before agent-sandbox 0.5)\n"
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

namespace {

std::int64_t parse_number(const std::string& flag, const std::string& v) {
    if (v.empty() || v.size() > 12 || v.find_first_not_of("0123456789") != std::string::npos)
        throw UsageError{flag + " needs a non-negative integer, got \"" + v + "\""};
    return std::stoll(v);
}

}  // namespace

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
    ok = ok || is_file_command(a.command);
    if (!ok) throw UsageError{"unknown command \"" + a.command + "\""};
    if (a.mode != "raw" && a.mode != "agent-sandbox") throw UsageError{"--mode must be raw or agent-sandbox"};
    if (is_file_command(a.command)) {
        // Everything after the ID belongs to the command: `--` lets OLD/NEW start with a dash.
        a.file.name = a.command;
        a.file.json = a.json;
        a.file.args.assign(a.rest.begin() + (a.rest.empty() ? 0 : 1), a.rest.end());
        a.file.args.insert(a.file.args.end(), a.argv.begin(), a.argv.end());
        if (a.rest.empty()) throw UsageError{a.command + " needs a sandbox ID"};
        if (auto problem = prepare_file_command(a.file)) throw UsageError{*problem};
    }
    return a;
}

}  // namespace kubesandbox::cli
