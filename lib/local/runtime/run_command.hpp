// POST /execute of the local sandbox runtime, as python-runtime runs a command: split as shlex
// does, no shell, in the base directory, in a session of its own whose group is killed at the
// timeout, output read from pipes asynchronously. Returns the JSON body (200 also for failures).
#pragma once

#include <boost/asio/awaitable.hpp>

#include <string>

namespace kubesandbox::runtime {

boost::asio::awaitable<std::string> run_command(std::string command, std::string base, double timeout_seconds);

}  // namespace kubesandbox::runtime
