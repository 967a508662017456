// The provider interface's conveniences, written once over its virtual operations.
#include <kubesandbox/sandbox_provider.hpp>

namespace kubesandbox {

boost::asio::awaitable<Result<std::unique_ptr<Sandbox>>> SandboxProvider::get_or_create(GetOrCreateOptions options) {
    auto got = co_await acquire(std::move(options));
    if (!got) co_return fail(got.error());
    co_return std::move(got->sandbox);
}

boost::asio::awaitable<Result<int>> SandboxProvider::ensure_warm_pool() { co_return 0; }

}  // namespace kubesandbox
