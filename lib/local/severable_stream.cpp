#include "local/severable_stream.hpp"

#include "net/forwarding_stream.hpp"

#include <algorithm>

namespace kubesandbox::local {

namespace asio = boost::asio;

struct SeverableStreams::State {
    net::AnyStream inner;
};

namespace {

// Forwards everything; the registry holds the state weakly.
using Severable = net::ForwardingStream<SeverableStreams::State>;

}  // namespace

net::AnyStream SeverableStreams::track(net::AnyStream stream) {
    // Forget the streams that are gone, so the list stays as long as the open connections.
    std::erase_if(tracked_, [](const std::weak_ptr<State>& w) { return w.expired(); });
    auto state = std::make_shared<State>();
    state->inner = std::move(stream);
    tracked_.push_back(state);
    return net::AnyStream(std::make_unique<Severable>(std::move(state)));
}

void SeverableStreams::sever_all() {
    for (auto& weak : tracked_)
        if (auto s = weak.lock()) s->inner.close();
    tracked_.clear();
}

}  // namespace kubesandbox::local
