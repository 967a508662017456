// The kubelet's side of a pod's spawner (pod_spawner.hpp): started at the pod's first exec,
// one per start of its container.
#include "local/kubelet_core.hpp"

#include <fcntl.h>

namespace kubesandbox::local::kubelet_detail {

using namespace std::chrono_literals;

asio::awaitable<std::shared_ptr<PodSpawner>> spawner_for(std::shared_ptr<Core> core, std::shared_ptr<PodRecord> pod) {
    if (!core->options.exec_spawner || !core->isolation || !pod->plan || pod->inner_pidfd.fd < 0 || pod->removed ||
        !pod->running())
        co_return nullptr;
    const std::uint64_t generation = pod->container_generation;
    if (pod->spawner && pod->spawner_generation == generation && pod->spawner->alive()) co_return pod->spawner;
    if (pod->spawner_starting || !pod->spawner_backoff.may_try(generation, SpawnerBackoff::Clock::now()))
        co_return nullptr;
    if (pod->spawner) pod->spawner->stop();
    pod->spawner.reset();
    pod->spawner_starting = true;
    Fd null_fd(::open("/dev/null", O_RDWR | O_CLOEXEC));
    Spawn sp;
    sp.env = pod->plan->env;
    sp.new_session = true;
    sp.argv = spawner_argv(*pod->plan, core->layout, pod->inner_pid, 4,
                           core->cgroups ? core->cgroups->procs_files(pod->uid) : std::vector<std::string>{});
    sp.dups = {{null_fd.fd, 0}, {null_fd.fd, 1}, {null_fd.fd, 2}, {pod->inner_pidfd.fd, 4}};
    // Killed with the exec processes when the cluster stops, and forgotten once reaped (before
    // its pid can be reused).
    auto on_start = [weak = core->self](pid_t pid) {
        if (auto c = weak.lock()) c->exec_pids.insert(pid);
    };
    auto on_exit = [weak = core->self](pid_t pid) {
        if (auto c = weak.lock()) c->exec_pids.erase(pid);
    };
    std::string why = "cannot open /dev/null";
    std::shared_ptr<PodSpawner> spawner;
    if (null_fd.fd >= 0)
        spawner = co_await PodSpawner::start(core->executor, std::move(sp), 5s, on_start, on_exit, why);
    pod->spawner_starting = false;
    if (!spawner) {
        pod->spawner_backoff.failed(generation, SpawnerBackoff::Clock::now());
        core->log("pod " + pod->ns + "/" + pod->name + ": " + why + "; its execs start one by one for " +
                  std::to_string(SpawnerBackoff::delay(pod->spawner_backoff.failures()).count()) + " s");
        co_return nullptr;
    }
    if (pod->removed || pod->container_generation != generation) {
        spawner->stop();
        co_return nullptr;
    }
    pod->spawner = spawner;
    pod->spawner_generation = generation;
    pod->spawner_backoff.succeeded();
    co_return spawner;
}

}  // namespace kubesandbox::local::kubelet_detail
