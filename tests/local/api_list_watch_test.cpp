// The local API server over loopback: consistent pages and their continue tokens, and watches
// (from a resourceVersion, while starting, timeouts and 410).
#include "api_server_helpers.hpp"

namespace json = boost::json;
using kubesandbox::FaultRule;
using kubesandbox::LocalCluster;
using kubesandbox::LocalClusterOptions;
using kubesandbox::test::HttpClient;
using kubesandbox::test::HttpResult;
using kubesandbox::test::WatchStream;
using namespace kubesandbox::test::api;

TEST(LocalApi, PaginationIsConsistent) {
    auto c = start_cluster();
    ASSERT_TRUE(c);
    HttpClient h(*c);
    for (int i = 0; i < 25; ++i) {
        char n[16];
        std::snprintf(n, sizeof n, "cm-%02d", i);
        ASSERT_EQ(h.post(cms, configmap(n)).status, 201u);
    }
    std::vector<std::string> seen;
    std::string cont;
    std::string first_rv;
    int pages = 0;
    do {
        std::string t = std::string(cms) + "?limit=4";
        if (!cont.empty()) t += "&continue=" + cont;
        auto r = h.get(t);
        ASSERT_EQ(r.status, 200u) << r.body;
        auto o = r.obj();
        auto n = names(o);
        EXPECT_LE(n.size(), 4u);
        seen.insert(seen.end(), n.begin(), n.end());
        auto& meta = o.at("metadata").as_object();
        if (pages == 0) {
            first_rv = str(meta.at("resourceVersion"));
            EXPECT_EQ(meta.at("remainingItemCount").to_number<int>(), 21);
        } else {
            EXPECT_EQ(str(meta.at("resourceVersion")), first_rv);
        }
        cont = meta.contains("continue") ? str(meta.at("continue")) : "";
        ++pages;
        // Objects created mid-list are not part of it; neither are deletions.
        if (pages == 2) {
            ASSERT_EQ(h.post(cms, configmap("cm-99")).status, 201u);
            ASSERT_EQ(h.post(cms, configmap("cm-00a")).status, 201u);
            ASSERT_EQ(h.del(std::string(cms) + "/cm-20").status, 200u);
        }
    } while (!cont.empty() && pages < 20);
    EXPECT_EQ(pages, 7);
    ASSERT_EQ(seen.size(), 25u);
    for (int i = 0; i < 25; ++i) {
        char n[16];
        std::snprintf(n, sizeof n, "cm-%02d", i);
        EXPECT_EQ(seen[static_cast<std::size_t>(i)], n);
    }
    EXPECT_EQ(h.get(std::string(cms) + "?limit=4&continue=%21%21garbage").status, 400u);
}

TEST(LocalApi, ContinueTokenExpires) {
    auto c = start_cluster();
    ASSERT_TRUE(c);
    HttpClient h(*c);
    for (int i = 0; i < 5; ++i) ASSERT_EQ(h.post(cms, configmap("e" + std::to_string(i))).status, 201u);
    auto first = h.get(std::string(cms) + "?limit=2").obj();
    std::string cont = str(first.at("metadata").at("continue"));
    c->expire_continue_tokens();
    auto gone = h.get(std::string(cms) + "?limit=2&continue=" + cont);
    ASSERT_EQ(gone.status, 410u);
    auto g = gone.obj();
    EXPECT_EQ(str(g.at("reason")), "Expired");
    EXPECT_EQ(str(g.at("message"))
                  .rfind("The provided continue parameter is too old to display a consistent list result.", 0),
              0u);
    // The inconsistent token from the 410 continues after the last key.
    std::string fresh = str(g.at("metadata").at("continue"));
    ASSERT_FALSE(fresh.empty());
    auto rest = h.get(std::string(cms) + "?limit=10&continue=" + fresh);
    ASSERT_EQ(rest.status, 200u);
    EXPECT_EQ(names(rest.obj()), (std::vector<std::string>{"e2", "e3", "e4"}));
}

TEST(LocalApi, WatchFromResourceVersionWithSelectorTransitions) {
    auto c = start_cluster();
    ASSERT_TRUE(c);
    HttpClient h(*c);
    auto base = h.post(cms, configmap("w1", {{"app", "a"}}));
    ASSERT_EQ(base.status, 201u);
    std::string rv = rv_of(base.obj());
    WatchStream w(*c, std::string(cms) + "?watch=true&labelSelector=app%3Da&resourceVersion=" + rv);
    ASSERT_EQ(w.status(), 200u);
    // Starts matching, changes, stops matching, matches again, is deleted.
    ASSERT_EQ(h.post(cms, configmap("w2", {{"app", "b"}})).status, 201u);
    ASSERT_EQ(h.patch(std::string(cms) + "/w2",
                      json::object{{"metadata", json::object{{"labels", json::object{{"app", "a"}}}}}},
                      "application/merge-patch+json")
                  .status,
              200u);
    ASSERT_EQ(h.patch(std::string(cms) + "/w1", json::object{{"data", json::object{{"k", "2"}}}},
                      "application/merge-patch+json")
                  .status,
              200u);
    ASSERT_EQ(h.patch(std::string(cms) + "/w1",
                      json::object{{"metadata", json::object{{"labels", json::object{{"app", "z"}}}}}},
                      "application/merge-patch+json")
                  .status,
              200u);
    ASSERT_EQ(h.del(std::string(cms) + "/w2").status, 200u);
    std::vector<std::pair<std::string, std::string>> got;
    for (int i = 0; i < 4; ++i) {
        auto ev = w.next();
        ASSERT_TRUE(ev) << "event " << i;
        got.emplace_back(str(ev->at("type")), str(ev->at("object").at("metadata").at("name")));
        EXPECT_EQ(str(ev->at("object").at("kind")), "ConfigMap");
    }
    std::vector<std::pair<std::string, std::string>> want{
        {"ADDED", "w2"}, {"MODIFIED", "w1"}, {"DELETED", "w1"}, {"DELETED", "w2"}};
    EXPECT_EQ(got, want);

    // RV unset: synthetic ADDED for what exists.
    WatchStream w2(*c, std::string(cms) + "?watch=1");
    auto ev = w2.next();
    ASSERT_TRUE(ev);
    EXPECT_EQ(str(ev->at("type")), "ADDED");
    EXPECT_EQ(str(ev->at("object").at("metadata").at("name")), "w1");

    // expire_watches ends open watches with an ERROR 410.
    c->expire_watches();
    auto err = w2.next();
    ASSERT_TRUE(err);
    EXPECT_EQ(str(err->at("type")), "ERROR");
    EXPECT_EQ(err->at("object").at("code").to_number<int>(), 410);
}

// A watch started from a resourceVersion sees every later event, also those recorded while the
// server is still writing the response head (the window between history replay and fan-out).
TEST(LocalApi, WatchMissesNoEventWhileStarting) {
    auto c = start_cluster(true);
    ASSERT_TRUE(c);
    HttpClient h(*c);
    ASSERT_EQ(h.post(cms, configmap("busy")).status, 201u);
    std::atomic<bool> stop{false};
    std::thread writer([&] {
        HttpClient hw(*c);
        for (int i = 0; !stop; ++i)
            hw.patch(std::string(cms) + "/busy", json::object{{"data", json::object{{"k", std::to_string(i)}}}},
                     "application/merge-patch+json");
    });
    struct JoinWriter {
        std::atomic<bool>& stop;
        std::thread& t;
        ~JoinWriter() {
            stop = true;
            t.join();
        }
    } join_writer{stop, writer};
    int checked = 0;
    for (int round = 0; round < 60; ++round) {
        auto cur = h.get(std::string(cms) + "/busy");
        ASSERT_EQ(cur.status, 200u);
        std::uint64_t rv = std::stoull(rv_of(cur.obj()));
        WatchStream w(*c, std::string(cms) + "?watch=true&resourceVersion=" + std::to_string(rv));
        ASSERT_EQ(w.status(), 200u);
        // Only this object changes, so resourceVersions arrive without gaps.
        for (int i = 0; i < 3; ++i) {
            auto ev = w.next();
            ASSERT_TRUE(ev) << "round " << round << " event " << i;
            std::uint64_t got = std::stoull(rv_of(ev->at("object").as_object()));
            ASSERT_EQ(got, rv + 1) << "round " << round << ": an event was lost";
            rv = got;
            ++checked;
        }
    }
    EXPECT_EQ(checked, 180);
}

TEST(LocalApi, WatchTimeoutAndTooOld) {
    auto c = start_cluster();
    ASSERT_TRUE(c);
    auto start = std::chrono::steady_clock::now();
    WatchStream w(*c, std::string(cms) + "?watch=true&timeoutSeconds=1&allowWatchBookmarks=true&resourceVersion=1");
    ASSERT_EQ(w.status(), 200u);
    auto ev = w.next(4000);  // the final bookmark
    ASSERT_TRUE(ev);
    EXPECT_EQ(str(ev->at("type")), "BOOKMARK");
    EXPECT_FALSE(w.next(4000));
    EXPECT_TRUE(w.ended());
    auto took = std::chrono::steady_clock::now() - start;
    EXPECT_GE(took, std::chrono::milliseconds(900));
    EXPECT_LT(took, std::chrono::seconds(4));
}
