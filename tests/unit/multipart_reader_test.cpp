// The local sandbox runtime's upload path without sockets: multipart bodies read in pieces of
// any size, and the spool that holds a file part until its body is complete.
#include "local/runtime/multipart_reader.hpp"
#include "local/runtime/upload_spool.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include <fcntl.h>
#include <unistd.h>

namespace rt = kubesandbox::runtime;
using State = rt::MultipartReader::State;

namespace {

struct Collected final : rt::MultipartReader::Events {
    std::vector<rt::FormPart> parts;
    std::size_t data_calls = 0;
    void on_part(const rt::FormPartHead& head) override { parts.push_back({head.name, head.filename, {}}); }
    void on_data(std::string_view data) override {
        EXPECT_FALSE(data.empty());
        EXPECT_FALSE(parts.empty());
        if (!parts.empty()) parts.back().data.append(data);
        ++data_calls;
    }
};

// Data that holds pieces of the delimiter without being one.
const std::string tricky_data = std::string("a\0\r\n--X b\r\n-\r\n--", 17) + "\r\n--XY" + "\r";

std::string sample_body() {
    return "preamble --X\r\n"
           "--XX\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nhi\r\n"
           "--XX\r\ncontent-disposition: form-data; name=\"file\"; filename=\"d/q\\\"x.bin\"\r\n"
           "Content-Type: application/octet-stream\r\n\r\n" +
           tricky_data + "\r\n--XX\r\nContent-Disposition: form-data; name=\"empty\"\r\n\r\n\r\n--XX--\r\nepilogue";
}

}  // namespace

TEST(MultipartReader, ReadsTheSamePartsWhateverThePieces) {
    const std::string body = sample_body();
    auto whole = rt::parse_multipart(body, "XX");
    ASSERT_TRUE(whole);
    ASSERT_EQ(whole->size(), 3u);
    EXPECT_EQ((*whole)[0].name, "note");
    EXPECT_EQ((*whole)[0].data, "hi");
    EXPECT_EQ((*whole)[1].filename, "d/q\"x.bin");
    EXPECT_EQ((*whole)[1].data, tricky_data);
    EXPECT_EQ((*whole)[2].name, "empty");
    EXPECT_EQ((*whole)[2].data, "");

    auto same = [&](const Collected& got) {
        if (got.parts.size() != whole->size()) return false;
        for (std::size_t i = 0; i < got.parts.size(); ++i) {
            const auto &a = got.parts[i], &b = (*whole)[i];
            if (a.name != b.name || a.filename != b.filename || a.data != b.data) return false;
        }
        return true;
    };
    // Two pieces split at every position, three pieces around every position, and byte by byte.
    for (std::size_t cut = 0; cut <= body.size(); ++cut) {
        Collected got;
        rt::MultipartReader reader("XX");
        reader.feed(std::string_view(body).substr(0, cut), got);
        reader.feed(std::string_view(body).substr(cut), got);
        EXPECT_EQ(reader.finish(), State::done) << cut;
        EXPECT_TRUE(same(got)) << "split at " << cut;
    }
    for (std::size_t cut = 1; cut + 1 < body.size(); ++cut) {
        Collected got;
        rt::MultipartReader reader("XX");
        reader.feed(std::string_view(body).substr(0, cut - 1), got);
        reader.feed(std::string_view(body).substr(cut - 1, 2), got);
        reader.feed(std::string_view(body).substr(cut + 1), got);
        EXPECT_EQ(reader.finish(), State::done) << cut;
        EXPECT_TRUE(same(got)) << "pieces around " << cut;
    }
    Collected bytewise;
    rt::MultipartReader reader("XX");
    for (char c : body) reader.feed(std::string_view(&c, 1), bytewise);
    EXPECT_EQ(reader.state(), State::done);
    EXPECT_TRUE(same(bytewise));
}

TEST(MultipartReader, ReportsALargePartAsItArrives) {
    rt::MultipartReader reader("boundary");
    Collected got;
    reader.feed("--boundary\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big\"\r\n\r\n", got);
    const std::string piece(64 * 1024, 'z');
    for (int i = 0; i < 160; ++i) {  // 10 MiB
        EXPECT_EQ(reader.feed(piece, got), State::reading);
        // All but what could start a delimiter has been handed on.
        ASSERT_EQ(got.parts.size(), 1u);
        EXPECT_GE(got.parts[0].data.size() + std::string("\r\n--boundary").size(), (i + 1) * piece.size());
    }
    reader.feed("\r\n--boundary--", got);
    EXPECT_EQ(reader.finish(), State::done);
    EXPECT_EQ(got.parts[0].data.size(), 160 * piece.size());
    EXPECT_GE(got.data_calls, 160u);
}

TEST(MultipartReader, MalformedBodies) {
    auto state_of = [](std::string_view body) {
        Collected got;
        rt::MultipartReader reader("XX");
        reader.feed(body, got);
        return reader.finish();
    };
    EXPECT_EQ(state_of(""), State::malformed);
    EXPECT_EQ(state_of("garbage"), State::malformed);
    EXPECT_EQ(state_of("--XX\r\nno headers end"), State::malformed);
    EXPECT_EQ(state_of("--XXjunk"), State::malformed);
    EXPECT_EQ(state_of("--XX\r\nX-Other: 1\r\n\r\ndata\r\n--XX--"), State::malformed);  // no Content-Disposition
    EXPECT_EQ(state_of("--XX\r\nContent-Disposition: form-data\r\n\r\ndata\r\n--XX--"), State::malformed);  // no name
    EXPECT_EQ(state_of("--XX\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\ncut short"), State::malformed);
    EXPECT_EQ(state_of("--XX\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\nok\r\n--XX--"), State::done);
    EXPECT_FALSE(rt::parse_multipart("--XX\r\nno headers end", "XX"));

    // A head that never ends is refused once it passes the limit, not held.
    rt::MultipartReader reader("XX");
    Collected got;
    reader.feed("--XX\r\nContent-Disposition: form-data; name=\"", got);
    State state = State::reading;
    for (int i = 0; i < 20 && state == State::reading; ++i) state = reader.feed(std::string(8192, 'n'), got);
    EXPECT_EQ(state, State::malformed);
    EXPECT_EQ(reader.feed("\"\r\n\r\n--XX--", got), State::malformed);  // stays refused
}

namespace {

struct TempDir {
    std::filesystem::path path;
    TempDir() {
        std::string name = (std::filesystem::temp_directory_path() / "spool-test-XXXXXX").string();
        path = ::mkdtemp(name.data());
    }
    ~TempDir() { std::filesystem::remove_all(path); }
};

std::string copied(rt::UploadSpool& spool, const std::filesystem::path& file, int* error) {
    int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    *error = spool.copy_to(fd);
    std::string out;
    char buf[65536];
    ::lseek(fd, 0, SEEK_SET);
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(n));
    ::close(fd);
    return out;
}

std::size_t entries(const std::filesystem::path& dir) {
    return static_cast<std::size_t>(std::distance(std::filesystem::directory_iterator(dir), {}));
}

}  // namespace

TEST(UploadSpool, KeepsTheFirstFilePartInMemoryOrAnUnlinkedFile) {
    TempDir dir;
    {
        rt::UploadSpool spool({dir.path.string()});
        spool.on_part({"note", std::nullopt});
        spool.on_data("not kept");
        spool.on_part({"file", std::nullopt});  // no filename: not a file
        spool.on_data("not kept either");
        spool.on_part({"file", "a/b.txt"});
        spool.on_data("small ");
        spool.on_data("file");
        spool.on_part({"file", "second"});
        spool.on_data("ignored");
        EXPECT_EQ(spool.filename(), "a/b.txt");
        EXPECT_EQ(spool.spool_error(), 0);
        int error = -1;
        EXPECT_EQ(copied(spool, dir.path / "small", &error), "small file");
        EXPECT_EQ(error, 0);
    }
    {
        // Past the memory limit the data moves to a file nobody else can open.
        rt::UploadSpool spool({"/nonexistent/spool", dir.path.string()});
        const auto before = entries(dir.path);
        spool.on_part({"file", "big"});
        std::string expected;
        for (int i = 0; i < 40; ++i) {
            std::string piece(50 * 1000 + i, static_cast<char>('a' + i % 26));
            expected += piece;
            spool.on_data(piece);
        }
        EXPECT_EQ(spool.spool_error(), 0);
        EXPECT_EQ(entries(dir.path), before);  // unlinked
        int error = -1;
        auto got = copied(spool, dir.path / "big", &error);
        EXPECT_EQ(error, 0);
        EXPECT_EQ(got.size(), expected.size());
        EXPECT_TRUE(got == expected);
    }
    {
        // Nowhere to spool: the failure is kept for the response, not lost.
        rt::UploadSpool spool({"/nonexistent/spool"});
        spool.on_part({"file", "big"});
        spool.on_data(std::string(rt::UploadSpool::memory_limit, 'x'));
        EXPECT_EQ(spool.spool_error(), 0);
        spool.on_data("one byte too many");
        EXPECT_EQ(spool.spool_error(), ENOENT);
    }
    {
        rt::UploadSpool spool({});  // no directory at all: an error, not data dropped
        spool.on_part({"file", "big"});
        spool.on_data(std::string(rt::UploadSpool::memory_limit + 1, 'x'));
        EXPECT_EQ(spool.spool_error(), ENOENT);
    }
    rt::UploadSpool none({dir.path.string()});
    none.on_part({"other", "f"});
    EXPECT_FALSE(none.filename());
}
