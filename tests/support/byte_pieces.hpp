// Sources and sinks for tests of streamed transfers.
#pragma once

#include <kubesandbox/sandbox.hpp>

#include <boost/asio/awaitable.hpp>

#include <memory>
#include <string>
#include <string_view>

namespace kubesandbox::test {

struct CollectedBytes {
    std::string data;
    int pieces = 0;

    // Valid while this object lives.
    ByteSink sink() {
        return [this](std::string_view piece) -> boost::asio::awaitable<bool> {
            ++pieces;
            data.append(piece);
            co_return true;
        };
    }
};

// `text` in uneven pieces, from 1 byte up to ~300 KB.
inline ByteSource uneven_pieces(std::shared_ptr<const std::string> text) {
    auto at = std::make_shared<std::size_t>(0), size = std::make_shared<std::size_t>(1);
    return [text, at, size]() -> boost::asio::awaitable<Result<std::string_view>> {
        std::string_view piece = std::string_view(*text).substr(*at, *size);
        *at += piece.size();
        *size = *size * 13 % 300007 + 1;
        co_return piece;
    };
}

}  // namespace kubesandbox::test
