// Quickstart: start the embedded local cluster (or use $KUBECONFIG when it is set), create a
// sandbox, run Python in it, move a file in and out, delete it.
#include <kubesandbox/kubesandbox.hpp>
#include <kubesandbox/local_cluster.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <cstdio>
#include <cstdlib>
#include <iostream>

namespace ks = kubesandbox;
namespace asio = boost::asio;

// Everything after creation; the caller deletes the sandbox whatever happens here.
asio::awaitable<int> use_sandbox(ks::Sandbox& sandbox) {
    auto run = co_await sandbox.execute("python3 -c 'print(2+2)'");
    if (!run) {
        std::cerr << "execute failed: " << run.error().describe() << "\n";
        co_return 1;
    }
    std::cout << "python3 says: " << run->output << "(exit " << run->exit_code.value_or(-1) << ")\n";

    std::vector<std::pair<std::string, std::string>> files{{"/workspace/hello.txt", "hello from kubesandbox\n"}};
    auto up = co_await sandbox.upload_files(std::move(files));
    std::vector<std::string> paths{"/workspace/hello.txt"};
    auto down = co_await sandbox.download_files(std::move(paths));
    if (!up || !down || (*up)[0].error || !(*down)[0].content) {
        std::cerr << "file round trip failed\n";
        co_return 1;
    }
    std::cout << "downloaded: " << *(*down)[0].content;
    co_return run->output == "4\n" ? 0 : 1;
}

// Written against the provider interface: the same code runs over any mode.
asio::awaitable<int> quickstart(ks::SandboxProvider& provider) {
    auto sandbox = co_await provider.get_or_create();
    if (!sandbox) {
        std::cerr << "create failed: " << sandbox.error().describe() << "\n";
        co_return 1;
    }
    std::cout << "sandbox " << (*sandbox)->id() << " is ready\n";
    int rc = co_await use_sandbox(**sandbox);
    const std::string id = (*sandbox)->id();
    auto gone = co_await provider.delete_sandbox(id);
    std::cout << "deleted: " << (gone && *gone ? "yes" : "no") << "\n";
    co_return gone&&* gone ? rc : 1;
}

int main() {
    std::unique_ptr<ks::LocalCluster> cluster;
    ks::KubeConfig config;
    if (const char* kc = std::getenv("KUBECONFIG"); kc && *kc) {
        auto loaded = ks::load_kubeconfig();  // its context's namespace is the sandboxes' namespace
        if (!loaded) {
            std::cerr << loaded.error().describe() << "\n";
            return 1;
        }
        config = *loaded;
        std::cout << "using the cluster of $KUBECONFIG (" << config.server << ")\n";
    } else {
        auto started = ks::LocalCluster::start();
        if (!started) {
            std::cerr << "local cluster: " << started.error().describe() << "\n";
            return 1;
        }
        cluster = std::move(*started);
        config = cluster->kube_config();
        std::cout << "embedded local cluster at " << cluster->url() << "\n";
    }

    asio::io_context io;
    ks::RawProviderOptions provider_options;
    if (!config.namespace_name.empty()) provider_options.namespace_name = config.namespace_name;
    ks::RawProvider provider(ks::KubeClient(io.get_executor(), config), provider_options);
    int rc = 1;
    asio::co_spawn(io, quickstart(provider), [&](std::exception_ptr e, int r) {
        if (e) std::rethrow_exception(e);
        rc = r;
    });
    io.run();
    return rc;
}
