#include "net/connect_gate.hpp"

#include "net/token_channel.hpp"

#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <utility>

namespace kubesandbox::net {

// A counting semaphore: the channel holds one token per free permit.
struct ConnectGate::Tokens {
    Tokens(boost::asio::any_io_executor executor, std::size_t n) : executor(executor), channel(executor, n) {}
    boost::asio::any_io_executor executor;
    TokenChannel channel;
};

ConnectGate::ConnectGate(boost::asio::any_io_executor executor, std::size_t limit)
    : limit_(std::max<std::size_t>(1, limit)), tokens_(std::make_unique<Tokens>(executor, limit_)) {
    for (std::size_t i = 0; i < limit_; ++i) tokens_->channel.try_send(boost::system::error_code{});
}

ConnectGate::~ConnectGate() = default;

ConnectGate::Permit::Permit(Permit&& other) noexcept : gate_(std::exchange(other.gate_, nullptr)) {}

ConnectGate::Permit& ConnectGate::Permit::operator=(Permit&& other) noexcept {
    if (this != &other) {
        if (gate_) gate_->tokens_->channel.try_send(boost::system::error_code{});
        gate_ = std::exchange(other.gate_, nullptr);
    }
    return *this;
}

ConnectGate::Permit::~Permit() {
    if (gate_) gate_->tokens_->channel.try_send(boost::system::error_code{});
}

boost::asio::awaitable<std::optional<ConnectGate::Permit>> ConnectGate::enter(
    std::chrono::steady_clock::time_point deadline) {
    if (tokens_->channel.try_receive([](boost::system::error_code) {})) co_return std::optional<Permit>(Permit(this));
    boost::asio::steady_timer timer(tokens_->executor);
    timer.expires_at(deadline);
    if (!co_await take_token(tokens_->channel, timer)) co_return std::nullopt;
    co_return std::optional<Permit>(Permit(this));
}

}  // namespace kubesandbox::net
