// The local cluster's EndpointSlice controller: a client of the cluster's own API (list-watch of
// Services, Pods and the slices it manages) that keeps one EndpointSlice per Service with a
// selector, as kube-controller-manager does; rules in endpoints_core.hpp. On the cluster's
// executor.
#pragma once

#include <kubesandbox/kube_client.hpp>
#include <kubesandbox/logger.hpp>

#include <boost/asio/any_io_executor.hpp>

#include <memory>

namespace kubesandbox::local {

class EndpointsController {
public:
    EndpointsController(boost::asio::any_io_executor executor, KubeClient client, Logger logger);
    ~EndpointsController();
    void start();
    void stop();  // on the executor

    struct Impl;

private:
    std::shared_ptr<Impl> impl_;
};

}  // namespace kubesandbox::local
