// An AnyStream::Impl that passes every operation to an inner stream held in shared state `State`
// (a struct with a member `inner`), so a wrapper overrides only what it changes and pending
// handlers may keep the state alive. Closing the wrapper closes the inner stream.
#pragma once

#include "net/any_stream.hpp"

#include <memory>

namespace kubesandbox::net {

template <class State>
class ForwardingStream : public AnyStream::Impl {
public:
    explicit ForwardingStream(std::shared_ptr<State> state) : s_(std::move(state)) {}
    ~ForwardingStream() override { s_->inner.close(); }

    boost::asio::any_io_executor executor() override { return s_->inner.get_executor(); }
    void read_some(boost::asio::mutable_buffer b, IoHandler h) override { s_->inner.async_read_some(b, std::move(h)); }
    void write_some(const ConstBufferList& b, IoHandler h) override { s_->inner.async_write_some(b, std::move(h)); }
    void handshake(DoneHandler h) override { s_->inner.async_handshake(std::move(h)); }
    void shutdown(DoneHandler h) override { s_->inner.async_shutdown(std::move(h)); }
    void close() noexcept override { s_->inner.close(); }
    void expires_after(std::chrono::steady_clock::duration d) override { s_->inner.expires_after(d); }
    void expires_never() override { s_->inner.expires_never(); }
    bool idle_alive() override { return s_->inner.idle_alive(); }
    bool is_tls() const noexcept override { return s_->inner.is_tls(); }
    void hold_writes(bool hold) noexcept override { s_->inner.hold_writes(hold); }
    void flush(DoneHandler h) override { s_->inner.async_flush(std::move(h)); }

protected:
    std::shared_ptr<State> s_;
};

}  // namespace kubesandbox::net
