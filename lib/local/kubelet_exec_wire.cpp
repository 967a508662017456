// The kubelet's exec wire pieces (see kubelet_plan.hpp): the exec request's query, the status
// documents on channel 3, and the frame sniffer. Sans-IO.
#include "local/kubelet_plan.hpp"

#include <boost/json/array.hpp>
#include <boost/url/parse.hpp>

#include <algorithm>
#include <cctype>
#include <map>

namespace kubesandbox::local {

namespace json = boost::json;

namespace {

// The command's words as kubectl shows them in its error text.
std::string join_words(const std::vector<std::string>& words) {
    std::string out;
    for (const auto& w : words) {
        if (!out.empty()) out += ' ';
        out += w;
    }
    return out;
}

}  // namespace

bool query_bool(std::optional<std::string_view> value) {
    if (!value) return false;
    if (*value == "0") return false;
    std::string lower(*value);
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    return lower != "false";
}

ExecQuery parse_exec_query(std::string_view target) {
    ExecQuery q;
    auto url = boost::urls::parse_origin_form(target);
    if (!url) return q;
    std::map<std::string, std::optional<std::string>> flags;
    for (auto param : url->params()) {
        if (param.key == "command") {
            q.command.push_back(param.value);
        } else if (param.key == "container") {
            q.container = param.value;
            q.has_container = true;
        } else {
            flags[param.key] =
                param.has_value ? std::optional<std::string>(param.value) : std::optional<std::string>("");
        }
    }
    auto flag = [&](const char* k) -> bool {
        auto it = flags.find(k);
        if (it == flags.end()) return false;
        return query_bool(it->second ? std::optional<std::string_view>(*it->second) : std::nullopt);
    };
    q.in = flag("stdin");
    q.out = flag("stdout");
    q.err = flag("stderr");
    q.tty = flag("tty");
    return q;
}

json::object exec_exit_status(int exit_code, const std::vector<std::string>& command) {
    if (exit_code == 0) return json::object{{"metadata", json::object{}}, {"status", "Success"}};
    auto code = std::to_string(exit_code);
    return json::object{
        {"metadata", json::object{}},
        {"status", "Failure"},
        {"message", "command terminated with non-zero exit code: error executing command [" + join_words(command) +
                        "], exit code " + code},
        {"reason", "NonZeroExitCode"},
        {"details", json::object{{"causes", json::array{json::object{{"reason", "ExitCode"}, {"message", code}}}}}},
    };
}

json::object exec_internal_error(std::string_view message) {
    std::string msg = "Internal error occurred: " + std::string(message);
    return json::object{
        {"metadata", json::object{}},
        {"status", "Failure"},
        {"message", msg},
        {"reason", "InternalError"},
        {"details", json::object{{"causes", json::array{json::object{{"message", message}}}}}},
        {"code", 500},
    };
}

void FrameSniffer::feed(const unsigned char* data, std::size_t n) {
    while (n > 0) {
        if (skip_ > 0) {
            auto take = static_cast<std::size_t>(std::min<std::uint64_t>(skip_, n));
            skip_ -= take;
            data += take;
            n -= take;
            continue;
        }
        header_[have_++] = *data++;
        --n;
        if (have_ < 2) continue;
        std::size_t len7 = header_[1] & 0x7f;
        std::size_t need = 2 + (len7 == 126 ? 2 : len7 == 127 ? 8 : 0) + ((header_[1] & 0x80) ? 4 : 0);
        if (have_ < need) continue;
        std::uint64_t len = len7;
        if (len7 == 126) len = (std::uint64_t(header_[2]) << 8) | header_[3];
        if (len7 == 127) {
            len = 0;
            for (int i = 0; i < 8; ++i) len = (len << 8) | header_[2 + i];
        }
        bool fin = header_[0] & 0x80;
        unsigned opcode = header_[0] & 0x0f;
        if (!fin || opcode == 0) fragmented_ = true;
        skip_ = len;
        have_ = 0;
    }
}

}  // namespace kubesandbox::local
