// libFuzzer target: Kubernetes name and label validation, and the label sanitiser: whatever the
// input, sanitize_label_value gives a valid label value, and validation agrees with itself.
#include "proto/validation.hpp"

#include <boost/json/object.hpp>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

namespace proto = kubesandbox::proto;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string_view in(reinterpret_cast<const char*>(data), size);
    try {
        std::string label = proto::sanitize_label_value(in);
        if (!proto::is_valid_label_value(label) || !proto::validate_label_value(label).empty()) std::abort();
        if (proto::is_valid_label_value(in) != proto::validate_label_value(in).empty()) std::abort();
        (void)proto::validate_dns1123_subdomain(in);
        (void)proto::validate_dns1035_label(in);
        (void)proto::validate_qualified_name(in);
        // A valid DNS label is also a valid subdomain.
        if (proto::validate_dns1123_label(in).empty() && !proto::validate_dns1123_subdomain(in).empty()) std::abort();
        boost::json::object meta{{"name", std::string(in)}, {"labels", boost::json::object{{std::string(in), "v"}}}};
        (void)proto::validate_object_meta(meta, proto::NameRule::dns1123_subdomain, false);
        (void)proto::go_quote(in);
    } catch (...) {
        std::abort();
    }
    return 0;
}
