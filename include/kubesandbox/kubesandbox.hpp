// Everything a program using kubesandbox needs, in one include. The embedded local cluster has
// its own header, <kubesandbox/local_cluster.hpp>, and library (dependency kubesandbox-local).
#pragma once

#include <kubesandbox/agent_sandbox_provider.hpp>
#include <kubesandbox/error.hpp>
#include <kubesandbox/file_format.hpp>
#include <kubesandbox/file_ops.hpp>
#include <kubesandbox/file_policy.hpp>
#include <kubesandbox/kube_client.hpp>
#include <kubesandbox/kube_config.hpp>
#include <kubesandbox/kube_types.hpp>
#include <kubesandbox/logger.hpp>
#include <kubesandbox/pod_exec_sandbox.hpp>
#include <kubesandbox/raw_provider.hpp>
#include <kubesandbox/router_connection.hpp>
#include <kubesandbox/router_sandbox.hpp>
#include <kubesandbox/sandbox.hpp>
#include <kubesandbox/sandbox_manager.hpp>
#include <kubesandbox/sandbox_provider.hpp>
