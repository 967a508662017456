// A test suite against one embedded local cluster: the cluster (started once per suite, in a
// data directory pods running as other uids can reach), faults cleared around each test, a
// client, and a bounded coroutine runner.
#pragma once

#include <kubesandbox/kube_client.hpp>
#include <kubesandbox/local_cluster.hpp>

#include "run_test.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

namespace kubesandbox::test {

inline boost::asio::awaitable<void> sleep_for(std::chrono::milliseconds d) {
    namespace asio = boost::asio;
    asio::steady_timer t(co_await asio::this_coro::executor);
    t.expires_after(d);
    co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
}

class LocalClusterTest : public ::testing::Test {
protected:
    // Without the agent-sandbox controller: its own API requests would take fault rules meant for
    // the code under test. Suites that need it call start_suite with agent_sandbox set.
    static void SetUpTestSuite() {
        LocalClusterOptions options;
        options.agent_sandbox = false;
        start_suite(options);
    }

    static void start_suite(LocalClusterOptions options) {
        static int suites = 0;
        // mkdtemp's 0700 would keep the pods' uids out.
        data_dir_ = std::filesystem::temp_directory_path() /
                    ("ksb-test-" + std::to_string(::getpid()) + "-" + std::to_string(++suites));
        std::filesystem::create_directories(data_dir_);
        std::filesystem::permissions(data_dir_, std::filesystem::perms(0755));
        options.data_dir = data_dir_;
        auto c = LocalCluster::start(options);
        ASSERT_TRUE(c) << c.error().describe();
        cluster_ = std::move(*c);
    }

    static void TearDownTestSuite() {
        cluster_.reset();
        std::error_code ec;
        std::filesystem::remove_all(data_dir_, ec);
    }

    void SetUp() override {
        ASSERT_TRUE(cluster_) << "the suite's local cluster did not start";
        cluster_->clear_faults();
    }

    void TearDown() override {
        if (cluster_) cluster_->clear_faults();
    }

    KubeClient client(KubeClientOptions options = {}) {
        return KubeClient(io_.get_executor(), cluster_->kube_config(), std::move(options));
    }

    // Runs one coroutine on io_; the test fails if it has not finished by the deadline.
    template <class F>
    void run(F f, std::chrono::seconds deadline = std::chrono::seconds(120)) {
        run_coroutine_test(io_, f, deadline);
    }

    static inline std::unique_ptr<LocalCluster> cluster_{};
    static inline std::filesystem::path data_dir_{};
    boost::asio::io_context io_;
};

}  // namespace kubesandbox::test
