// libFuzzer target: label and field selector parsers. Any input must parse or fail cleanly;
// a parsed label selector must survive a round trip through its canonical text.
#include "proto/label_selector.hpp"

#include <cstdint>
#include <cstdlib>
#include <map>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string_view text(reinterpret_cast<const char*>(data), size);
    namespace proto = kubesandbox::proto;

    if (auto sel = proto::LabelSelector::parse(text)) {
        static const std::map<std::string, std::string> labels = {{"app", "web"}, {"n", "5"}, {"in", ""}};
        (void)sel->matches(labels);
        (void)sel->matches(nullptr);
        auto again = proto::LabelSelector::parse(sel->to_string());
        if (!again) std::abort();
        const auto& a = sel->requirements();
        const auto& b = again->requirements();
        if (a.size() != b.size()) std::abort();
        for (std::size_t i = 0; i < a.size(); ++i)
            if (a[i].key != b[i].key || a[i].op != b[i].op || a[i].values != b[i].values) std::abort();
    } else if (!sel.error().is(kubesandbox::errc::bad_request)) {
        std::abort();
    }

    if (auto fs = proto::FieldSelector::parse(text)) {
        boost::json::object obj{{"metadata", boost::json::object{{"name", "x"}}}};
        (void)fs->matches(obj);
        (void)fs->check_supported({"metadata.name"});
    } else if (!fs.error().is(kubesandbox::errc::bad_request)) {
        std::abort();
    }
    return 0;
}
