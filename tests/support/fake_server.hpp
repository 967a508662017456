// A scriptable HTTP/1.1 server on 127.0.0.1 for client component tests: each request goes to a
// handler that returns raw bytes to send, a delay, and whether to close or drop the connection.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace kubesandbox::test {

struct FakeRequest {
    std::string method;
    std::string target;
    std::map<std::string, std::string> headers;  // lower-case names
    std::string body;
};

struct FakeReply {
    FakeReply(std::string raw_bytes, std::chrono::milliseconds delay_before = std::chrono::milliseconds(0),
              bool close = false)
        : raw(std::move(raw_bytes)), delay(delay_before), close_after(close) {}
    std::string raw;                                                      // bytes written as they are
    std::chrono::milliseconds delay{0};                                   // before writing
    bool close_after = false;                                             // close after writing
    std::vector<std::pair<std::string, std::chrono::milliseconds>> more;  // further pieces, each after a pause
};

// Helpers for common replies.
std::string http_response(unsigned status, std::string_view body, std::string_view content_type = "application/json",
                          std::vector<std::pair<std::string, std::string>> headers = {});
std::string chunked_head(unsigned status = 200, std::string_view content_type = "application/json");
std::string chunk(std::string_view data);  // one chunk; chunk("") is the terminator

class FakeServer {
public:
    using Handler = std::function<FakeReply(const FakeRequest&)>;
    FakeServer(boost::asio::io_context& io, Handler handler);
    ~FakeServer();
    std::string url() const;
    unsigned short port() const;
    int connections_accepted() const { return *accepted_; }
    int requests_seen() const { return *requests_; }
    void stop();

    struct State;

private:
    std::shared_ptr<State> state_;
    std::shared_ptr<std::atomic<int>> accepted_ = std::make_shared<std::atomic<int>>(0);
    std::shared_ptr<std::atomic<int>> requests_ = std::make_shared<std::atomic<int>>(0);
};

}  // namespace kubesandbox::test
