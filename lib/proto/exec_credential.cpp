#include "proto/exec_credential.hpp"

#include "proto/kubeconfig.hpp"

#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

namespace kubesandbox::proto {
namespace json = boost::json;

namespace {

Error bad(std::string what) {
    return make_error(errc::exec_plugin_failed, "invalid ExecCredential: " + std::move(what));
}

// A string member, "" when absent or null; nullopt when present with another type.
std::optional<std::string> string_member(const json::object& o, std::string_view key) {
    auto it = o.find(key);
    if (it == o.end() || it->value().is_null()) return std::string();
    if (!it->value().is_string()) return std::nullopt;
    return std::string(it->value().get_string());
}

bool digits(std::string_view s, std::size_t pos, std::size_t n, int& out) noexcept {
    if (pos + n > s.size()) return false;
    int v = 0;
    for (std::size_t i = pos; i < pos + n; ++i) {
        if (s[i] < '0' || s[i] > '9') return false;
        v = v * 10 + (s[i] - '0');
    }
    out = v;
    return true;
}

// Days since 1970-01-01 of a proleptic Gregorian date.
long long days_from_civil(int y, unsigned m, unsigned d) noexcept {
    y -= m <= 2 ? 1 : 0;
    const long long era = (y >= 0 ? y : y - 399) / 400;
    const unsigned yoe = static_cast<unsigned>(y - era * 400);
    const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + static_cast<long long>(doe) - 719468;
}

bool leap(int y) noexcept { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

}  // namespace

std::optional<std::chrono::system_clock::time_point> parse_rfc3339(std::string_view s) noexcept {
    int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
    if (!digits(s, 0, 4, year) || s.size() < 20 || s[4] != '-' || !digits(s, 5, 2, month) || s[7] != '-' ||
        !digits(s, 8, 2, day) || (s[10] != 'T' && s[10] != 't' && s[10] != ' ') || !digits(s, 11, 2, hour) ||
        s[13] != ':' || !digits(s, 14, 2, minute) || s[16] != ':' || !digits(s, 17, 2, second))
        return std::nullopt;
    static constexpr int month_days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (month < 1 || month > 12 || day < 1) return std::nullopt;
    if (day > month_days[month - 1] + (month == 2 && leap(year) ? 1 : 0)) return std::nullopt;
    if (hour > 23 || minute > 59 || second > 60) return std::nullopt;  // 60: leap second
    std::size_t pos = 19;
    long long nanos = 0;
    if (pos < s.size() && s[pos] == '.') {
        ++pos;
        std::size_t start = pos;
        long long scale = 100000000;
        while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') {
            nanos += (s[pos] - '0') * scale;
            scale /= 10;
            ++pos;
        }
        if (pos == start) return std::nullopt;
    }
    if (pos >= s.size()) return std::nullopt;
    int offset_minutes = 0;
    if (s[pos] == 'Z' || s[pos] == 'z') {
        ++pos;
    } else if (s[pos] == '+' || s[pos] == '-') {
        int oh = 0, om = 0;
        if (!digits(s, pos + 1, 2, oh) || pos + 3 >= s.size() || s[pos + 3] != ':' || !digits(s, pos + 4, 2, om) ||
            oh > 23 || om > 59)
            return std::nullopt;
        offset_minutes = (oh * 60 + om) * (s[pos] == '-' ? -1 : 1);
        pos += 6;
    } else {
        return std::nullopt;
    }
    if (pos != s.size()) return std::nullopt;
    const long long secs = days_from_civil(year, static_cast<unsigned>(month), static_cast<unsigned>(day)) * 86400 +
                           hour * 3600 + minute * 60 + second - offset_minutes * 60;
    using namespace std::chrono;
    // system_clock counts nanoseconds (years ~1678-2262): a time outside, Go's zero time
    // 0001-01-01 included, is clamped to the ends rather than overflowing.
    constexpr long long max_secs = duration_cast<seconds>(system_clock::duration::max()).count() - 1;
    constexpr long long min_secs = duration_cast<seconds>(system_clock::duration::min()).count() + 1;
    if (secs >= max_secs) return system_clock::time_point::max();
    if (secs <= min_secs) return system_clock::time_point::min();
    return system_clock::time_point(duration_cast<system_clock::duration>(seconds(secs) + nanoseconds(nanos)));
}

Result<ExecCredentialStatus> parse_exec_credential(std::string_view text, std::string_view expected_api_version) {
    boost::system::error_code ec;
    json::value doc = json::parse(text, ec);
    if (ec) return tl::unexpected(bad("output is not JSON (" + ec.message() + ")"));
    if (!doc.is_object()) return tl::unexpected(bad("output is not a JSON object"));
    const json::object& root = doc.get_object();
    auto kind = string_member(root, "kind");
    if (!kind || *kind != "ExecCredential") return tl::unexpected(bad("kind is not ExecCredential"));
    auto api = string_member(root, "apiVersion");
    if (!api || (*api != exec_api_v1 && *api != exec_api_v1beta1))
        return tl::unexpected(bad("apiVersion is not client.authentication.k8s.io/v1 or v1beta1"));
    if (!expected_api_version.empty() && *api != expected_api_version)
        return tl::unexpected(
            bad("apiVersion " + *api + " does not match the configured " + std::string(expected_api_version)));
    auto st = root.find("status");
    if (st == root.end() || !st->value().is_object()) return tl::unexpected(bad("status is missing"));
    const json::object& status = st->value().get_object();

    ExecCredentialStatus out;
    auto token = string_member(status, "token");
    auto cert = string_member(status, "clientCertificateData");
    auto key = string_member(status, "clientKeyData");
    auto expiry = string_member(status, "expirationTimestamp");
    if (!token) return tl::unexpected(bad("status.token is not a string"));
    if (!cert) return tl::unexpected(bad("status.clientCertificateData is not a string"));
    if (!key) return tl::unexpected(bad("status.clientKeyData is not a string"));
    if (!expiry) return tl::unexpected(bad("status.expirationTimestamp is not a string"));
    if (cert->empty() != key->empty())
        return tl::unexpected(bad("status.clientCertificateData and status.clientKeyData must be set together"));
    if (token->empty() && cert->empty())
        return tl::unexpected(bad("status has neither a token nor a client certificate and key"));
    if (!cert->empty() && !pem_has_certificates(*cert))
        return tl::unexpected(bad("status.clientCertificateData is not a PEM certificate"));
    if (!key->empty() && !pem_has_private_key(*key))
        return tl::unexpected(bad("status.clientKeyData is not a PEM private key"));
    if (!expiry->empty()) {
        out.expiry = parse_rfc3339(*expiry);
        if (!out.expiry) return tl::unexpected(bad("status.expirationTimestamp is not an RFC 3339 time"));
    }
    out.token = std::move(*token);
    out.client_certificate_pem = std::move(*cert);
    out.client_key_pem = std::move(*key);
    return out;
}

std::string make_exec_info(std::string_view api_version, const std::optional<ExecClusterInfo>& cluster) {
    json::object spec;
    spec["interactive"] = false;
    if (cluster) {
        json::object c;
        c["server"] = cluster->server;
        if (!cluster->tls_server_name.empty()) c["tls-server-name"] = cluster->tls_server_name;
        c["insecure-skip-tls-verify"] = cluster->insecure_skip_tls_verify;
        if (!cluster->certificate_authority_pem.empty())
            c["certificate-authority-data"] = base64_encode(cluster->certificate_authority_pem);
        if (!cluster->proxy_url.empty()) c["proxy-url"] = cluster->proxy_url;
        spec["cluster"] = std::move(c);
    }
    json::object root;
    root["apiVersion"] = api_version;
    root["kind"] = "ExecCredential";
    root["spec"] = std::move(spec);
    return json::serialize(root);
}

}  // namespace kubesandbox::proto
