// Google Benchmark micro-benchmarks of the sans-IO codecs on the hot paths: watch event
// decoding, the exec channel framing, label selectors, Status errors, patches, kubeconfig.
//
//   build/bench/micro_codecs [--benchmark_filter=...]
#include <kubesandbox/kube_config.hpp>

#include "proto/channel_protocol.hpp"
#include "proto/label_selector.hpp"
#include "proto/patch.hpp"
#include "proto/status.hpp"
#include "proto/watch_decoder.hpp"

#include <benchmark/benchmark.h>
#include <boost/json.hpp>

#include <map>
#include <string>

namespace {

namespace ks = kubesandbox;
namespace json = boost::json;

std::string pod_json(int i) {
    json::object pod{
        {"apiVersion", "v1"},
        {"kind", "Pod"},
        {"metadata", json::object{{"name", "ksb-thread-" + std::to_string(i)},
                                  {"namespace", "default"},
                                  {"resourceVersion", std::to_string(1000 + i)},
                                  {"labels", json::object{{"kubesandbox.io/managed-by", "kubesandbox"},
                                                          {"kubesandbox.io/sandbox-id", "thread-" + std::to_string(i)},
                                                          {"kubesandbox.io/pool-status", "active"}}}}},
        {"spec", json::object{{"containers", json::array{json::object{{"name", "sandbox"}, {"image", "busybox"}}}}}},
        {"status", json::object{{"phase", "Running"}, {"podIP", "10.0.0.1"}}}};
    return json::serialize(pod);
}

// A watch stream of 100 MODIFIED pod events, fed in 4 KiB pieces as a socket delivers them.
void BM_WatchDecoder(benchmark::State& state) {
    std::string stream;
    for (int i = 0; i < 100; ++i) stream += R"({"type":"MODIFIED","object":)" + pod_json(i) + "}\n";
    for (auto _ : state) {
        ks::proto::WatchDecoder decoder;
        int events = 0;
        for (std::size_t off = 0; off < stream.size(); off += 4096) {
            decoder.feed(std::string_view(stream).substr(off, 4096));
            for (;;) {
                auto ev = decoder.next();
                if (!ev || !*ev) break;
                ++events;
            }
        }
        if (events != 100) state.SkipWithError("wrong event count");
        benchmark::DoNotOptimize(events);
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * stream.size()));
}
BENCHMARK(BM_WatchDecoder);

// The v5 channel frames of an exec's output: 64 KiB of stdout per frame.
void BM_ChannelFrameRoundTrip(benchmark::State& state) {
    std::string payload(64 * 1024, 'x');
    for (auto _ : state) {
        std::string frame = ks::proto::encode_channel_frame(1, payload);
        auto decoded = ks::proto::decode_channel_frame(frame);
        if (!decoded) state.SkipWithError("decode failed");
        benchmark::DoNotOptimize(decoded);
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * payload.size()));
}
BENCHMARK(BM_ChannelFrameRoundTrip);

void BM_LabelSelectorParseAndMatch(benchmark::State& state) {
    std::map<std::string, std::string> labels{{"kubesandbox.io/managed-by", "kubesandbox"},
                                              {"kubesandbox.io/scope", "thread"},
                                              {"kubesandbox.io/pool-status", "active"},
                                              {"team", "red"}};
    for (auto _ : state) {
        auto sel = ks::proto::LabelSelector::parse(
            "kubesandbox.io/managed-by=kubesandbox,kubesandbox.io/scope in (thread,chat),!kubesandbox.io/warm");
        if (!sel) state.SkipWithError("parse failed");
        bool m = sel->matches(labels);
        benchmark::DoNotOptimize(m);
    }
}
BENCHMARK(BM_LabelSelectorParseAndMatch);

void BM_StatusError(benchmark::State& state) {
    const std::string body =
        R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"ksb-x\" already exists",)"
        R"("reason":"AlreadyExists","details":{"name":"ksb-x","kind":"pods"},"code":409})";
    for (auto _ : state) {
        auto e = ks::proto::error_from_response(409, "application/json", body);
        if (!e.is(ks::errc::already_exists)) state.SkipWithError("wrong code");
        benchmark::DoNotOptimize(e);
    }
}
BENCHMARK(BM_StatusError);

// The activity annotation patch the providers send on every use, applied as a server would.
void BM_MergePatch(benchmark::State& state) {
    json::value pod = json::parse(pod_json(1));
    json::value patch =
        json::parse(R"({"metadata":{"annotations":{"kubesandbox.io/last-activity":"2026-11-24T22:00:00.000Z"}}})");
    for (auto _ : state) {
        auto out = ks::proto::apply_merge_patch(pod, patch);
        benchmark::DoNotOptimize(out);
    }
}
BENCHMARK(BM_MergePatch);

void BM_KubeconfigParse(benchmark::State& state) {
    const std::string yaml = R"(apiVersion: v1
kind: Config
current-context: local
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:6443
    insecure-skip-tls-verify: true
users:
- name: local
  user:
    token: abcdef0123456789
contexts:
- name: local
  context:
    cluster: local
    user: local
    namespace: sandboxes
)";
    for (auto _ : state) {
        auto cfg = ks::parse_kubeconfig(yaml, "bench", "/");
        if (!cfg) state.SkipWithError("parse failed");
        benchmark::DoNotOptimize(cfg);
    }
}
BENCHMARK(BM_KubeconfigParse);

}  // namespace

BENCHMARK_MAIN();
