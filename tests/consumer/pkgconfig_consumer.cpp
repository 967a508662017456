// Built with only `pkg-config --cflags --libs kubesandbox` against an installed kubesandbox:
// proves the installed headers and the .pc file are enough to compile and link.
#include <kubesandbox/error.hpp>
#include <kubesandbox/kube_config.hpp>

#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include <cstdio>

int main() {
    auto cfg = kubesandbox::KubeConfig::from_url("http://127.0.0.1:6443", {}, "agents");
    auto err = kubesandbox::make_error(kubesandbox::errc::not_found, "pods \"p\" not found");
    boost::json::object o;
    o["server"] = cfg.server;
    o["namespace"] = cfg.namespace_name;
    o["error"] = err.describe();
    std::printf("%s\n", boost::json::serialize(o).c_str());
    return err.is(kubesandbox::errc::not_found) && cfg.namespace_name == "agents" ? 0 : 1;
}
