// Shared helpers: RFC 3339 times, tolerant JSON access, random names, the logger.
#include <kubesandbox/error.hpp>
#include <kubesandbox/logger.hpp>

#include "util/bounded_for_each.hpp"
#include "util/child_process.hpp"
#include "util/json_access.hpp"
#include "util/random.hpp"
#include "util/time_format.hpp"

#include <gtest/gtest.h>
#include <boost/json/parse.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <set>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdexcept>
#include <thread>
#include <vector>

namespace {
using namespace kubesandbox;
using namespace std::chrono_literals;

TEST(TimeFormat, RoundTripsAndRejectsGarbage) {
    auto t = util::parse_rfc3339("2026-11-24T14:28:48.123Z");
    ASSERT_TRUE(t);
    EXPECT_EQ(util::format_rfc3339(*t, true), "2026-11-24T14:28:48.123Z");
    EXPECT_EQ(util::format_rfc3339(*t), "2026-11-24T14:28:48Z");
    auto offset = util::parse_rfc3339("2026-11-24T16:28:48+02:00");
    ASSERT_TRUE(offset);
    EXPECT_EQ(util::format_rfc3339(*offset), "2026-11-24T14:28:48Z");
    EXPECT_TRUE(util::parse_rfc3339("2026-11-24T14:28:48"));
    EXPECT_FALSE(util::parse_rfc3339("yesterday"));
    EXPECT_FALSE(util::parse_rfc3339("2026-11-24T14:28:48Zjunk"));
    EXPECT_FALSE(util::parse_rfc3339("2026-11-24T14:28:48+0"));
    EXPECT_FALSE(util::parse_rfc3339("9999-01-01T00:00:00Z"));  // past what system_clock holds
    EXPECT_FALSE(util::parse_rfc3339("0001-01-01T00:00:00Z"));  // Go's zero time: no overflow either
    EXPECT_EQ(util::parse_decimal("600"), 600);
    EXPECT_FALSE(util::parse_decimal("-1"));
    EXPECT_FALSE(util::parse_decimal("1e9"));
    EXPECT_FALSE(util::parse_decimal("99999999999999999999"));
}

TEST(JsonAccess, MissingAndMistypedFieldsReadEmpty) {
    auto o = boost::json::parse(R"({"metadata":{"name":7,"labels":{"a":"b"},"annotations":[]},"n":-3})").as_object();
    EXPECT_EQ(util::string_at(util::metadata_of(o), "name"), "");
    EXPECT_EQ(util::label_of(o, "a"), "b");
    EXPECT_EQ(util::annotation_of(o, "a"), "");
    EXPECT_EQ(util::int_at(&o, "n"), -3);
    EXPECT_FALSE(util::int_at(nullptr, "n"));
    EXPECT_EQ(util::object_at(o, "n"), nullptr);
    boost::json::object empty;
    EXPECT_TRUE(util::metadata_of(empty).empty());
}

// Small requests come from a per-thread pool: across many refills no value comes out twice, and
// a forked child does not hand out the bytes its parent will.
TEST(Random, SmallValuesFromThePoolAreNeverRepeatedNotEvenAcrossAFork) {
    std::set<std::string> seen;
    for (int i = 0; i < 20000; ++i) seen.insert(util::random_hex(8));
    EXPECT_EQ(seen.size(), 20000u);
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        const std::string mine = util::random_hex(8);
        [[maybe_unused]] auto w = ::write(fds[1], mine.data(), mine.size());
        ::_exit(0);
    }
    ::close(fds[1]);
    char buf[16] = {};
    std::size_t got = 0;
    while (got < sizeof buf) {
        const ssize_t n = ::read(fds[0], buf + got, sizeof buf - got);
        if (n <= 0) break;
        got += static_cast<std::size_t>(n);
    }
    ::close(fds[0]);
    int status = 0;
    ::waitpid(child, &status, 0);
    ASSERT_EQ(got, sizeof buf);
    EXPECT_NE(std::string(buf, sizeof buf), util::random_hex(8));
}

TEST(Random, HexAndAlphabet) {
    auto h = util::random_hex(16);
    EXPECT_EQ(h.size(), 32u);
    EXPECT_EQ(h.find_first_not_of("0123456789abcdef"), std::string::npos);
    EXPECT_NE(util::random_hex(16), h);
    auto s = util::random_string("xy", 50);
    EXPECT_EQ(s.find_first_not_of("xy"), std::string::npos);
    EXPECT_EQ(util::sha256_hex("abc", 8), "ba7816bf");
}

TEST(Logger, FiltersByLevelAndUsesTheSink) {
    std::vector<std::pair<LogLevel, std::string>> lines;
    Logger log(LogLevel::warning, [&](LogLevel l, std::string_view m) { lines.emplace_back(l, std::string(m)); });
    log.info("hidden");
    log.warning("shown");
    log.log(LogLevel::error, "also");
    ASSERT_EQ(lines.size(), 2u);
    EXPECT_EQ(lines[0].first, LogLevel::warning);
    EXPECT_EQ(lines[0].second, "shown");
    EXPECT_EQ(to_string(lines[1].first), "error");
    Logger::silent().warning("nothing happens");
}

}  // namespace

namespace {
using namespace kubesandbox;

TEST(ErrorClassification, PermanentAndUnknownOutcomes) {
    EXPECT_TRUE(make_error(errc::tls_error, "x").is_permanent());
    EXPECT_TRUE(make_error(errc::invalid_config, "x").is_permanent());
    EXPECT_FALSE(make_error(errc::connection_failed, "x").is_permanent());
    EXPECT_FALSE(make_error(errc::timeout, "x").is_permanent());
    EXPECT_TRUE(make_error(errc::timeout, "x").outcome_unknown());
    EXPECT_TRUE(make_error(errc::connection_closed, "x").outcome_unknown());
    EXPECT_TRUE(make_error(errc::service_unavailable, "x").outcome_unknown());
    EXPECT_FALSE(make_error(errc::connection_failed, "x").outcome_unknown());  // nothing was sent
    EXPECT_FALSE(make_error(errc::conflict, "x").outcome_unknown());
    // Lower-layer codes are neither: the caller decides from what it was doing.
    auto reset = make_error(boost::system::errc::make_error_code(boost::system::errc::connection_reset), "x");
    EXPECT_FALSE(reset.is_permanent());
    EXPECT_FALSE(reset.outcome_unknown());
}

}  // namespace

namespace {
namespace asio = boost::asio;

// Runs `body` on `threads` threads of one io_context; false when it did not finish in 10 s.
template <class Body>
bool run_bounded(int threads, Body body) {
    asio::io_context io;
    asio::steady_timer guard(io, 10s);
    guard.async_wait([&](boost::system::error_code ec) {
        if (!ec) io.stop();
    });
    bool finished = false;
    asio::co_spawn(io, body(), [&](std::exception_ptr) {
        finished = true;
        guard.cancel();
    });
    std::vector<std::thread> pool;
    for (int i = 0; i < threads; ++i) pool.emplace_back([&] { io.run(); });
    for (auto& t : pool) t.join();
    return finished;
}
}  // namespace

TEST(BoundedForEach, RunsEveryStepWithAtMostLimitInFlightOnOneStrand) {
    std::vector<int> done;
    int in_flight = 0, most = 0;
    bool rethrown = false;
    bool finished = run_bounded(4, [&]() -> asio::awaitable<void> {
        // Four threads run the io_context; the steps' unguarded counters stay exact only
        // because they share a strand.
        co_await util::bounded_for_each(50, 3, [&](std::size_t i) -> asio::awaitable<void> {
            ++in_flight;
            most = std::max(most, in_flight);
            asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::milliseconds(i % 4));
            co_await t.async_wait(asio::use_awaitable);
            done.push_back(static_cast<int>(i));
            --in_flight;
        });
        co_await util::bounded_for_each(0, 3, [&](std::size_t) -> asio::awaitable<void> {
            throw std::logic_error("no step runs for an empty range");
            co_return;
        });
        try {
            co_await util::bounded_for_each(10, 0, [&](std::size_t i) -> asio::awaitable<void> {
                if (i == 4) throw std::runtime_error("step 4");
                co_return;
            });
        } catch (const std::runtime_error&) {
            rethrown = true;
        }
    });
    ASSERT_TRUE(finished);
    EXPECT_EQ(most, 3);
    EXPECT_EQ(in_flight, 0);
    std::sort(done.begin(), done.end());
    std::vector<int> all(50);
    for (int i = 0; i < 50; ++i) all[i] = i;
    EXPECT_EQ(done, all);
    EXPECT_TRUE(rethrown);
}

// The local kubelet's exec pipes: grown to a megabyte within a budget of a quarter of
// fs.pipe-user-pages-soft (past which the kernel shrinks every new pipe of the user), the pages
// given back when a pipe is shrunk before it closes, and kept when its bytes do not fit.
long read_proc_long(const char* path, long fallback) {
    long v = fallback;
    if (FILE* f = std::fopen(path, "re")) {
        if (std::fscanf(f, "%ld", &v) != 1) v = fallback;
        std::fclose(f);
    }
    return v;
}

TEST(GrownPipe, GrowsWithinTheBudgetAndGetsPagesBackWhenShrunk) {
    const long soft = read_proc_long("/proc/sys/fs/pipe-user-pages-soft", 16384);
    const int want = static_cast<int>(std::min<long>(1 << 20, read_proc_long("/proc/sys/fs/pipe-max-size", 1 << 20)));
    std::vector<std::array<int, 2>> pipes;
    auto open_pipe = [&]() -> int {
        std::array<int, 2> p{};
        EXPECT_EQ(::pipe2(p.data(), O_CLOEXEC), 0);
        pipes.push_back(p);
        return p[1];
    };
    {
        // A grown pipe holds what it says: `want` bytes go in without a reader, never blocking.
        const int fd = open_pipe();
        util::GrownPipe full(fd, want);
        EXPECT_EQ(full.capacity(), want);
        EXPECT_EQ(full.capacity(), ::fcntl(fd, F_GETPIPE_SZ));
        ::fcntl(fd, F_SETFL, O_NONBLOCK);
        std::vector<char> bytes(static_cast<std::size_t>(want), 'x');
        EXPECT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
        // Its bytes do not fit the old size: it stays grown, and its pages stay spent.
        const long pages = full.budget_pages();
        EXPECT_GT(pages, 0);
        full.shrink(fd);
        EXPECT_EQ(full.budget_pages(), pages);
        EXPECT_EQ(::fcntl(fd, F_GETPIPE_SZ), want);
    }
    // Spend the rest of the budget, then one more is refused and keeps its size. (A budget too
    // large to spend within the descriptor limit, or none, is checked for not refusing early.)
    const long per_pipe = (want - 64 * 1024 + 4095) / 4096;
    const bool spendable = soft > 0 && soft / 4 / per_pipe < 300;
    std::vector<util::GrownPipe> grown;
    std::vector<int> fds;
    int refused_before = -1;
    for (int i = 0; i < (spendable ? 300 : 20); ++i) {
        const int fd = open_pipe();
        const int before = ::fcntl(fd, F_GETPIPE_SZ);
        util::GrownPipe g(fd, want);
        if (g.capacity() != want) {
            refused_before = before;
            EXPECT_EQ(g.capacity(), before);
            EXPECT_EQ(::fcntl(fd, F_GETPIPE_SZ), before);
            EXPECT_EQ(g.budget_pages(), 0);
            break;
        }
        grown.push_back(std::move(g));
        fds.push_back(fd);
    }
    if (!spendable) {
        EXPECT_EQ(refused_before, -1) << "refused within a budget too large to spend";
        refused_before = 0;
    }
    ASSERT_GE(refused_before, 0) << "the budget was never spent";
    ASSERT_FALSE(grown.empty());
    // An empty pipe shrunk back gives its pages back, and the next pipe grows again.
    grown.back().shrink(fds.back());
    EXPECT_EQ(grown.back().budget_pages(), 0);
    EXPECT_LT(::fcntl(fds.back(), F_GETPIPE_SZ), want);
    util::GrownPipe again(open_pipe(), want);
    EXPECT_EQ(again.capacity(), want);
    again.shrink(pipes.back()[1]);
    for (std::size_t i = 0; i < grown.size(); ++i) grown[i].shrink(fds[i]);
    for (auto& p : pipes) {
        ::close(p[0]);
        ::close(p[1]);
    }
}
