// Runs a coroutine test on an io_context with a hard deadline, so no test can hang.
#pragma once

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <exception>
#include <functional>

namespace kubesandbox::test {

template <class MakeAwaitable>
void run_coroutine_test(boost::asio::io_context& io, MakeAwaitable make, std::chrono::milliseconds deadline) {
    bool done = false;
    std::exception_ptr error;
    boost::asio::co_spawn(io, make(), [&](std::exception_ptr e) {
        done = true;
        error = e;
        io.stop();  // servers in the test keep the context busy otherwise
    });
    io.run_for(deadline);
    ASSERT_TRUE(done) << "coroutine test did not finish within " << deadline.count() << " ms";
    if (error) std::rethrow_exception(error);
}

}  // namespace kubesandbox::test
