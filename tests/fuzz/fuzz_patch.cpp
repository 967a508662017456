// libFuzzer target: JSON merge patch, JSON patch and strategic merge patch. Input: a target
// document, a NUL byte, a patch document. Nothing throws, failures are typed, and no patch can
// grow a document beyond the copy limit.
#include "proto/patch.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <cstdint>
#include <cstdlib>
#include <string_view>

namespace proto = kubesandbox::proto;
namespace json = boost::json;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string_view in(reinterpret_cast<const char*>(data), size);
    auto nul = in.find('\0');
    if (nul == std::string_view::npos) return 0;
    boost::system::error_code ec1, ec2;
    json::value target = json::parse(in.substr(0, nul), ec1);
    json::value patch = json::parse(in.substr(nul + 1), ec2);
    if (ec1 || ec2) return 0;
    try {
        const std::size_t before = json::serialize(target).size() + json::serialize(patch).size();
        json::value merged = proto::apply_merge_patch(target, patch);
        if (json::serialize(merged).size() > before + 16) std::abort();
        auto jp = proto::apply_json_patch(target, patch);
        if (jp && json::serialize(*jp).size() >
                      before * (1 + proto::max_json_patch_operations) + 4 * proto::max_json_patch_copy_bytes)
            std::abort();
        if (!jp && jp.error().message.empty()) std::abort();
        auto sp = proto::apply_strategic_merge_patch(target, patch);
        if (!sp && sp.error().message.empty()) std::abort();
        if (!proto::json_equal(target, target)) std::abort();
    } catch (...) {
        std::abort();
    }
    return 0;
}
