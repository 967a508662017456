#include "util/time_format.hpp"

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <ctime>

namespace kubesandbox::util {

using std::chrono::system_clock;

std::string format_rfc3339(system_clock::time_point tp, bool milliseconds) {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(tp.time_since_epoch()).count();
    auto secs_total = ms / 1000;
    auto millis = ms % 1000;
    if (millis < 0) {
        millis += 1000;
        --secs_total;
    }
    std::time_t secs = static_cast<std::time_t>(secs_total);
    std::tm tm{};
    gmtime_r(&secs, &tm);
    char buf[96];
    if (milliseconds)
        std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                      tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(millis));
    else
        std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                      tm.tm_hour, tm.tm_min, tm.tm_sec);
    return buf;
}

std::string now_rfc3339(bool milliseconds) { return format_rfc3339(system_clock::now(), milliseconds); }

std::optional<system_clock::time_point> parse_rfc3339(std::string_view s) {
    if (s.size() < 19) return std::nullopt;
    int y, mo, d, h, mi, sec;
    std::string head(s.substr(0, 19));
    if (std::sscanf(head.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d", &y, &mo, &d, &h, &mi, &sec) != 6) return std::nullopt;
    if (y < 1970 || y > 2200) return std::nullopt;  // system_clock overflows past 2262
    std::tm tm{};
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = sec;
    auto tp = system_clock::from_time_t(timegm(&tm));
    std::size_t i = 19;
    if (i < s.size() && s[i] == '.') {
        ++i;
        std::int64_t frac = 0;
        int digits = 0;
        while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
            if (digits < 6) {
                frac = frac * 10 + (s[i] - '0');
                ++digits;
            }
            ++i;
        }
        while (digits < 6) {
            frac *= 10;
            ++digits;
        }
        tp += std::chrono::microseconds(frac);
    }
    if (i == s.size()) return tp;
    if (s[i] == 'Z' || s[i] == 'z') return i + 1 == s.size() ? std::optional(tp) : std::nullopt;
    if ((s[i] == '+' || s[i] == '-') && s.size() == i + 6) {
        int oh = 0, om = 0;
        std::string off(s.substr(i + 1, 5));
        if (std::sscanf(off.c_str(), "%2d:%2d", &oh, &om) != 2) return std::nullopt;
        auto offset = std::chrono::hours(oh) + std::chrono::minutes(om);
        return s[i] == '+' ? tp - offset : tp + offset;
    }
    return std::nullopt;
}

std::optional<std::int64_t> parse_decimal(std::string_view s) {
    if (s.empty()) return std::nullopt;
    std::int64_t v = 0;
    for (char c : s) {
        if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
        v = v * 10 + (c - '0');
        if (v > (std::int64_t{1} << 50)) return std::nullopt;
    }
    return v;
}

}  // namespace kubesandbox::util
