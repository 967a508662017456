// Boost assertion handler for kubesandbox's own targets (built with
// BOOST_ENABLE_ASSERT_DEBUG_HANDLER, so NDEBUG builds assert nothing, as before). It does what
// the default handler does, print and abort, except for one assertion that is known to be false:
// Beast before 1.86 asserts `n >= 5` in basic_parser::parse_chunk_header when an empty chunked
// body's last chunk ("0\r\n") was put() and the next put() brings fewer than two bytes more.
// The code after it is right for that input (it is what NDEBUG builds run; boostorg/beast#2861
// corrected the bound upstream), so the parse goes on instead of aborting the process.
#include <boost/assert.hpp>
#include <boost/version.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kubesandbox::detail {
namespace {

bool known_false_assertion(const char* expr, const char* file) {
#if BOOST_VERSION < 108600
    const char* tail = "beast/http/impl/basic_parser.ipp";
    std::size_t n = std::strlen(file), t = std::strlen(tail);
    return std::strcmp(expr, "n >= 5") == 0 && n >= t && std::strcmp(file + n - t, tail) == 0;
#else
    (void)expr;
    (void)file;
    return false;
#endif
}

[[noreturn]] void fail(const char* expr, const char* msg, const char* function, const char* file, long line) {
    std::fprintf(stderr, "%s:%ld: %s: Assertion `%s' failed%s%s.\n", file, line, function, expr, msg ? ": " : "",
                 msg ? msg : "");
    std::fflush(stderr);
    std::abort();
}

}  // namespace
}  // namespace kubesandbox::detail

// Weak: a program that defines its own handler (BOOST_ENABLE_ASSERT_HANDLER) and links the
// static library links without a clash, and its handler serves both, as it does over the shared
// library (whose other users here, the local cluster and the tools, take ours from it).
#define KUBESANDBOX_WEAK_HANDLER __attribute__((weak))

namespace boost {

KUBESANDBOX_WEAK_HANDLER void assertion_failed(char const* expr, char const* function, char const* file, long line) {
    if (kubesandbox::detail::known_false_assertion(expr, file)) return;
    kubesandbox::detail::fail(expr, nullptr, function, file, line);
}

KUBESANDBOX_WEAK_HANDLER void assertion_failed_msg(char const* expr, char const* msg, char const* function,
                                                   char const* file, long line) {
    if (kubesandbox::detail::known_false_assertion(expr, file)) return;
    kubesandbox::detail::fail(expr, msg, function, file, line);
}

}  // namespace boost
