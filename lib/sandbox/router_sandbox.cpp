// RouterSandbox: the python-runtime protocol over a RouterConnection (see router_sandbox.hpp);
// its file transfers are in router_transfers.cpp.
#include <kubesandbox/router_sandbox.hpp>

#include "proto/kubeconfig.hpp"
#include "sandbox/router_internals.hpp"
#include "sandbox/runtime_protocol.hpp"
#include "util/random.hpp"

#include <boost/json/parse.hpp>

namespace kubesandbox {

namespace asio = boost::asio;
namespace rp = runtime_protocol;
using router_detail::RunOutcome;
using router_detail::status_error;
using std::chrono::steady_clock;

namespace {

class ExecuteSink final : public ResponseSink {
public:
    explicit ExecuteSink(std::size_t cap) : reader(cap) {}
    void on_head(unsigned s, std::string_view) override { status = s; }
    void on_body_size(std::uint64_t bytes) override {
        if (status == 200) reader.expect_body(bytes);
    }
    bool on_body(std::string_view chunk) override {
        if (status != 200) {
            router_detail::keep_error_body(error_body, chunk);
            return true;
        }
        if (!reader.write(chunk)) malformed = true;
        return !malformed;
    }
    rp::ExecuteResponseReader reader;
    unsigned status = 0;
    std::string error_body;
    bool malformed = false;
};

// The "detail" or "message" of an error body, else its start.
std::string error_text(std::string_view body) {
    boost::system::error_code ec;
    auto v = boost::json::parse(body, ec);
    if (!ec && v.is_object()) {
        for (const char* key : {"detail", "message"}) {
            if (auto* d = v.get_object().if_contains(key); d && d->is_string()) return std::string(d->get_string());
        }
    }
    return std::string(body.substr(0, 200));
}

ExecuteResponse timed_out_response(std::int64_t seconds) {
    ExecuteResponse r;
    r.output = "Command timed out after " + std::to_string(seconds) + " seconds";
    r.exit_code = 124;
    return r;
}

}  // namespace

Error router_detail::status_error(unsigned status, std::string_view body, const std::string& what) {
    std::string text = what + ": HTTP " + std::to_string(status) + ": " + error_text(body);
    switch (status) {
        case 401:
            return make_error(errc::unauthorized, text);
        case 403:
            return make_error(errc::forbidden, text);
        case 404:
            return make_error(errc::not_found, text);
        case 422:
            return make_error(errc::invalid, text);
        case 502:
        case 503:
            return make_error(errc::service_unavailable, text);
        case 504:
            return make_error(errc::server_timeout, text);
        default:
            return make_error(errc::unknown_status, text);
    }
}

void RouterSandbox::Internals::add_headers(RouterRequest& request, const RouterSandbox& self,
                                           std::string_view content_type, std::optional<std::int64_t> router_timeout) {
    request.fields.reserve(self.sandbox_fields_.size() + 32 + content_type.size());
    request.fields = self.sandbox_fields_;
    request.bad_field = !self.sandbox_fields_ok_;
    request.router_timeout_at_most = router_timeout.value_or(INT64_MAX);
    if (!content_type.empty()) request.add_header("Content-Type", content_type);
}

asio::awaitable<Result<RunOutcome>> RouterSandbox::Internals::run(RouterSandbox& self, std::string body,
                                                                  steady_clock::time_point deadline,
                                                                  std::optional<std::int64_t> router_timeout,
                                                                  std::size_t cap) {
    RouterRequest request;
    request.method = "POST";
    request.target = "/execute";
    add_headers(request, self, "application/json", router_timeout);
    request.body = std::move(body);
    ExecuteSink sink(cap);
    auto what = [&self] { return "execute in " + self.id_ + " via " + self.connection_->describe(); };
    auto status = co_await self.connection_->impl().send(std::move(request), deadline, sink);
    if (!status) {
        Error e = status.error();
        if (sink.malformed) e = make_error(errc::invalid_response, what() + ": malformed /execute response");
        co_return fail(std::move(e));
    }
    if (*status != 200) co_return fail(status_error(*status, sink.error_body, what()));
    if (!sink.reader.finish() || !sink.reader.exit_code())
        co_return fail(errc::invalid_response, what() + ": malformed /execute response");
    RunOutcome out;
    out.stdout_text = std::move(sink.reader.stdout_text());
    out.stderr_text = std::move(sink.reader.stderr_text());
    out.stderr_tail = std::move(sink.reader.stderr_tail());
    out.exit_code = *sink.reader.exit_code();
    out.truncated = sink.reader.truncated();
    co_return out;
}

RouterSandbox::RouterSandbox(std::shared_ptr<RouterConnection> connection, RouterSandboxOptions options)
    : connection_(std::move(connection)),
      options_(std::move(options)),
      id_(options_.id.empty() ? options_.namespace_name + "/" + options_.sandbox_name : options_.id) {
    RouterRequest fields;
    fields.add_header("X-Sandbox-ID", options_.sandbox_name);
    fields.add_header("X-Sandbox-Namespace", options_.namespace_name);
    fields.add_header("X-Sandbox-Port", std::to_string(options_.port));
    if (options_.pod_ip) fields.add_header("X-Sandbox-Pod-IP", *options_.pod_ip);
    sandbox_fields_ = std::move(fields.fields);
    sandbox_fields_ok_ = !fields.bad_field;
}

RouterSandbox::~RouterSandbox() = default;

// A command run through the runtime: a response already made (a timeout, the runtime's own
// failure) or the command's streams and exit code.
struct RouterSandbox::Internals::Executed {
    std::optional<ExecuteResponse> answered;
    rp::DecodedRun run;
    int exit_code = 0;
};

asio::awaitable<Result<RouterSandbox::Internals::Executed>> RouterSandbox::Internals::execute_command(
    RouterSandbox& self, std::string command, std::optional<std::chrono::seconds> timeout) {
    if (command.find('\0') != std::string::npos)
        co_return fail(errc::invalid_argument, "the command contains a NUL byte");
    if (timeout && timeout->count() < 0) co_return fail(errc::invalid_argument, "negative timeout");
    const std::int64_t limit = timeout.value_or(self.options_.default_timeout).count();
    const std::string marker = "kubesandbox-timeout-" + util::random_hex(8);
    // The watchdog in the sandbox fires first; the router gives up a little later and our own
    // deadline later still, so a slow call ends with a clean answer where possible.
    std::optional<std::int64_t> router_timeout;
    auto deadline = steady_clock::now() + std::chrono::hours(24);
    if (limit > 0) {
        router_timeout = limit + 5;
        deadline = steady_clock::now() + std::chrono::seconds(limit + 15);
    }
    // Output travels base64-encoded: the cap applies to the encoded text (4/3, plus line breaks).
    const std::size_t cap = self.options_.max_output_bytes;
    const std::size_t encoded_cap = cap / 3 * 4 + cap / 57 + 256;
    auto ran =
        co_await run(self, rp::execute_command_body(command, marker, limit), deadline, router_timeout, encoded_cap);
    if (!ran) co_return fail(ran.error());
    if (self.options_.on_activity) self.options_.on_activity();
    Executed out;
    if (auto failure = rp::runtime_failure(ran->stderr_text, ran->exit_code); !failure.empty()) {
        if (auto runtime_limit = rp::runtime_timeout_seconds(failure)) {
            out.answered = timed_out_response(*runtime_limit);
        } else {
            out.answered = ExecuteResponse{"Failed to execute command: " + failure, 1, false};
        }
        co_return out;
    }
    out.run = rp::decode_run(std::move(ran->stdout_text), std::move(ran->stderr_text), ran->stderr_tail, ran->truncated,
                             marker);
    if (out.run.timed_out) {
        out.answered = timed_out_response(limit);
        co_return out;
    }
    if (out.run.malformed)
        co_return fail(errc::invalid_response, "execute in " + self.id_ + ": the command's output came back garbled");
    std::int64_t code = out.run.plain ? ran->exit_code : out.run.exit_code.value_or(ran->exit_code);
    // The runtime reports a signal as -N (Python's returncode); a shell says 128+N.
    out.exit_code = static_cast<int>(code < 0 ? 128 - code : code);
    co_return out;
}

asio::awaitable<Result<ExecuteResponse>> RouterSandbox::execute(std::string command,
                                                                std::optional<std::chrono::seconds> timeout) {
    auto done = co_await Internals::execute_command(*this, std::move(command), timeout);
    if (!done) co_return fail(done.error());
    if (done->answered) co_return std::move(*done->answered);
    auto composed = rp::compose_output(std::move(done->run.stdout_bytes), std::move(done->run.stderr_bytes),
                                       done->run.truncated, options_.max_output_bytes);
    ExecuteResponse r;
    r.output = std::move(composed.output);
    r.truncated = composed.truncated;
    r.exit_code = done->exit_code;
    co_return r;
}

asio::awaitable<Result<ExecuteResponse>> RouterSandbox::execute(std::string command,
                                                                std::optional<std::chrono::seconds> timeout,
                                                                OutputSink sink) {
    auto done = co_await Internals::execute_command(*this, std::move(command), timeout);
    if (!done) co_return fail(done.error());
    if (done->answered) {
        // The runtime's own failure is the command's stderr; a timeout's message stays the output.
        if (done->answered->exit_code != 124) {
            done->answered->output += '\n';
            if (!co_await sink(2, done->answered->output))
                co_return fail(errc::cancelled, "the output sink stopped the command");
            done->answered->output.clear();
        }
        co_return std::move(*done->answered);
    }
    ExecuteResponse r;
    r.truncated = done->run.truncated;
    for (int stream : {1, 2}) {
        std::string_view rest = stream == 1 ? done->run.stdout_bytes : done->run.stderr_bytes;
        if (rest.size() > options_.max_output_bytes) {
            rest = rest.substr(0, options_.max_output_bytes);  // the cap travels encoded: a little more came
            r.truncated = true;
        }
        while (!rest.empty()) {
            const std::string_view piece = rest.substr(0, 1024 * 1024);
            if (!co_await sink(stream, piece)) co_return fail(errc::cancelled, "the output sink stopped the command");
            rest.remove_prefix(piece.size());
        }
    }
    r.exit_code = done->exit_code;
    co_return r;
}

}  // namespace kubesandbox
