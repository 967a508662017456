// A server-side stream the local cluster can cut from outside, wherever it has been handed on
// (the kubelet's exec and port-forward streams included): what an API server restart does to
// its clients. Internal; single-threaded (the cluster's executor).
#pragma once

#include "net/any_stream.hpp"

#include <memory>
#include <vector>

namespace kubesandbox::local {

class SeverableStreams {
public:
    // `stream`, wrapped so that sever_all() closes it.
    net::AnyStream track(net::AnyStream stream);
    // Closes every tracked stream that is still open; they stay closed.
    void sever_all();

    struct State;

private:
    std::vector<std::weak_ptr<State>> tracked_;
};

}  // namespace kubesandbox::local
