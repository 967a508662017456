#include "local/severable_stream.hpp"

#include <algorithm>

namespace kubesandbox::local {

namespace asio = boost::asio;

struct SeverableStreams::State {
    net::AnyStream inner;
};

namespace {

// Forwards everything; the registry holds the state weakly.
class Severable final : public net::AnyStream::Impl {
public:
    explicit Severable(std::shared_ptr<SeverableStreams::State> s) : s_(std::move(s)) {}
    ~Severable() override { s_->inner.close(); }

    asio::any_io_executor executor() override { return s_->inner.get_executor(); }
    void read_some(asio::mutable_buffer b, net::IoHandler h) override { s_->inner.async_read_some(b, std::move(h)); }
    void write_some(const net::ConstBufferList& b, net::IoHandler h) override {
        s_->inner.async_write_some(b, std::move(h));
    }
    void handshake(net::DoneHandler h) override { s_->inner.async_handshake(std::move(h)); }
    void shutdown(net::DoneHandler h) override { s_->inner.async_shutdown(std::move(h)); }
    void close() noexcept override { s_->inner.close(); }
    void expires_after(std::chrono::steady_clock::duration d) override { s_->inner.expires_after(d); }
    void expires_never() override { s_->inner.expires_never(); }
    bool idle_alive() override { return s_->inner.idle_alive(); }
    bool is_tls() const noexcept override { return s_->inner.is_tls(); }

private:
    std::shared_ptr<SeverableStreams::State> s_;
};

}  // namespace

net::AnyStream SeverableStreams::track(net::AnyStream stream) {
    // Forget the streams that are gone, so the list stays as long as the open connections.
    std::erase_if(tracked_, [](const std::weak_ptr<State>& w) { return w.expired(); });
    auto state = std::make_shared<State>();
    state->inner = std::move(stream);
    tracked_.push_back(state);
    return net::AnyStream(std::make_unique<Severable>(std::move(state)));
}

void SeverableStreams::sever_all() {
    for (auto& weak : tracked_)
        if (auto s = weak.lock()) s->inner.close();
    tracked_.clear();
}

}  // namespace kubesandbox::local
