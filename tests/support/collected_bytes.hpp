// A ByteSink that keeps what it is given, for tests of streamed downloads.
#pragma once

#include <kubesandbox/sandbox.hpp>

#include <boost/asio/awaitable.hpp>

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

}  // namespace kubesandbox::test
