// kubesandbox-local: runs the embedded local cluster until SIGINT/SIGTERM and writes a kubeconfig
// for kubectl and other clients.
#include <kubesandbox/local_cluster.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <string_view>

namespace {

void usage(std::FILE* out) {
    std::fprintf(out,
                 "usage: kubesandbox-local --kubeconfig PATH [options]\n"
                 "\n"
                 "Runs a local Kubernetes API emulator whose pods are bubblewrap-isolated processes.\n"
                 "\n"
                 "  --kubeconfig PATH        write a kubeconfig for the cluster here (atomically, once ready),\n"
                 "                           and the sandbox router's URL and token as PATH.router\n"
                 "  --port N                 listen on port N (default: a free port)\n"
                 "  --bind ADDR              listen address (default 127.0.0.1; other addresses expose the API)\n"
                 "  --data-dir DIR           keep pod working directories here (default: a temporary directory)\n"
                 "  --plain-http             serve plain HTTP instead of HTTPS. kubectl sends no credentials\n"
                 "                           over plain HTTP (it ignores the kubeconfig's token there), so\n"
                 "                           use it with --insecure-allow-anonymous for kubectl; other clients\n"
                 "                           may still send the token, which is checked\n"
                 "  --insecure-allow-anonymous\n"
                 "                           with --plain-http: accept requests without credentials, with\n"
                 "                           full access (like the old insecure port); a wrong token still\n"
                 "                           gets 401. Anyone who can reach the port controls the cluster\n"
                 "  --image NAME=ROOT        map an image (exact, or a prefix ending in '*') to a root: host,\n"
                 "                           busybox or a directory (repeatable)\n"
                 "  --allow-no-isolation     run pods without bubblewrap namespaces when unavailable (unsafe)\n"
                 "  --bwrap PATH             the bubblewrap program (default: bwrap from PATH)\n"
                 "  --help                   show this help\n");
}

}  // namespace

int main(int argc, char** argv) {
    kubesandbox::LocalClusterOptions options;
    std::string kubeconfig;
    for (int i = 1; i < argc; ++i) {
        std::string_view a = argv[i];
        auto value = [&](std::string_view name) -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "kubesandbox-local: %.*s needs a value\n", static_cast<int>(name.size()),
                             name.data());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--help" || a == "-h") {
            usage(stdout);
            return 0;
        } else if (a == "--kubeconfig") {
            kubeconfig = value(a);
        } else if (a == "--port") {
            std::string v = value(a);
            char* end = nullptr;
            long p = std::strtol(v.c_str(), &end, 10);
            if (!end || *end || p < 0 || p > 65535) {
                std::fprintf(stderr, "kubesandbox-local: invalid port: %s\n", v.c_str());
                return 2;
            }
            options.port = static_cast<std::uint16_t>(p);
        } else if (a == "--bind") {
            options.bind_address = value(a);
        } else if (a == "--data-dir") {
            options.data_dir = value(a);
        } else if (a == "--plain-http") {
            options.tls = false;
        } else if (a == "--image") {
            std::string v = value(a);
            auto eq = v.find('=');
            if (eq == std::string::npos || eq == 0 || eq + 1 == v.size()) {
                std::fprintf(stderr, "kubesandbox-local: --image wants NAME=ROOT, got: %s\n", v.c_str());
                return 2;
            }
            options.images[v.substr(0, eq)] = v.substr(eq + 1);
        } else if (a == "--allow-no-isolation") {
            options.allow_no_isolation = true;
        } else if (a == "--insecure-allow-anonymous") {
            options.allow_anonymous = true;
        } else if (a == "--bwrap") {
            options.bwrap_program = value(a);
        } else {
            std::fprintf(stderr, "kubesandbox-local: unknown argument: %s\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (kubeconfig.empty()) {
        std::fprintf(stderr, "kubesandbox-local: --kubeconfig PATH is required\n");
        usage(stderr);
        return 2;
    }
    if (options.allow_anonymous && options.tls) {
        std::fprintf(stderr,
                     "kubesandbox-local: --insecure-allow-anonymous needs --plain-http (over HTTPS kubectl "
                     "sends the kubeconfig's token)\n");
        return 2;
    }
    if (!options.tls && !options.allow_anonymous)
        std::fprintf(stderr,
                     "kubesandbox-local: note: kubectl sends no token over plain HTTP, so its requests will "
                     "get 401; add --insecure-allow-anonymous to accept them\n");
    if (options.allow_anonymous)
        std::fprintf(stderr,
                     "kubesandbox-local: WARNING: unauthenticated requests are accepted with full access "
                     "(--insecure-allow-anonymous)\n");
    // Install the signal handlers before the cluster thread starts.
    boost::asio::io_context ioc;
    boost::asio::signal_set signals(ioc, SIGINT, SIGTERM);
    auto cluster = kubesandbox::LocalCluster::start(options);
    if (!cluster) {
        std::fprintf(stderr, "kubesandbox-local: %s\n", cluster.error().describe().c_str());
        return 1;
    }
    if (!(*cluster)->isolation_available()) {
        std::string why = (*cluster)->isolation_problem();
        if (options.allow_no_isolation)
            std::fprintf(stderr,
                         "kubesandbox-local: WARNING: bubblewrap isolation is unavailable (%s); pods run "
                         "UNISOLATED as host processes (--allow-no-isolation)\n",
                         why.c_str());
        else
            std::fprintf(stderr,
                         "kubesandbox-local: warning: bubblewrap isolation is unavailable (%s); pods will "
                         "fail with reason IsolationUnavailable (use --allow-no-isolation to run them "
                         "unisolated)\n",
                         why.c_str());
    }
    if (auto w = (*cluster)->write_kubeconfig(kubeconfig); !w) {
        std::fprintf(stderr, "kubesandbox-local: %s\n", w.error().describe().c_str());
        return 1;
    }
    if (auto w = (*cluster)->write_router_config(kubeconfig + ".router"); !w) {
        std::fprintf(stderr, "kubesandbox-local: %s\n", w.error().describe().c_str());
        return 1;
    }
    std::fprintf(stderr, "kubesandbox-local: serving %s (kubeconfig %s)\n", (*cluster)->url().c_str(),
                 kubeconfig.c_str());
    std::fprintf(stderr, "kubesandbox-local: sandbox router %s (token in %s.router)\n",
                 (*cluster)->router_url().c_str(), kubeconfig.c_str());
    int received = 0;
    signals.async_wait([&](const boost::system::error_code& ec, int sig) {
        if (!ec) received = sig;
    });
    ioc.run();
    std::fprintf(stderr, "kubesandbox-local: signal %d, stopping\n", received);
    (*cluster)->stop();
    return 0;
}
