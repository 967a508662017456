// The client side of the python-runtime protocol, without sockets.
#include "sandbox/runtime_protocol.hpp"
#include "proto/base64.hpp"
#include "sandbox/runtime_files.hpp"
#include "sandbox/transfer_status.hpp"

#include <boost/json/parse.hpp>

#include <gtest/gtest.h>

namespace rp = kubesandbox::runtime_protocol;
using namespace std::string_literals;

TEST(RuntimeProtocol, QuotesPathSegmentsLikePythonQuoteSafeEmpty) {
    EXPECT_EQ(rp::quote_segment("a/b c~_.-ü%"), "a%2Fb%20c~_.-%C3%BC%25");
}

TEST(RuntimeProtocol, ExecuteBodyQuotesForShlexAndFallsBackToBase64) {
    auto body = boost::json::parse(rp::execute_body({"sh", "-c", "echo 'a' \"$b\""}));
    EXPECT_EQ(body.at("command").as_string(), R"('sh' '-c' 'echo '\''a'\'' "$b"')");
    auto binary = boost::json::parse(rp::execute_body({"printf", "\xff"}));
    std::string command(binary.at("command").as_string());
    EXPECT_EQ(command.rfind("sh -c 'eval \"$(printf %s ", 0), 0u) << command;
    EXPECT_NE(command.find(" | base64 -d)\"'"), std::string::npos);
}

TEST(RuntimeProtocol, ExecuteCommandBodyIsTheWrappedArgvsBodyByteForByte) {
    const std::vector<std::string> commands = {"true",
                                               "",
                                               "echo 'a' \"$b\" \\ `x`",
                                               "printf 'x\\ny'\n\tz\r",
                                               "a\x01\x1f\x7f b",
                                               "é ü 漢字 🙂",
                                               "'''",
                                               "\"\"\"",
                                               "$(rm -rf /) ; $HOME",
                                               "bad \xff utf-8",
                                               "\xc3",
                                               std::string(5000, '\'')};
    // Every ASCII byte on its own too, each escaped (or not) as the serializer does.
    std::vector<std::string> all = commands;
    for (int c = 1; c < 0x80; ++c) all.push_back("<" + std::string(1, static_cast<char>(c)) + ">");
    for (const auto& command : all) {
        for (std::int64_t timeout : {0, 7, 1800}) {
            for (std::string marker : {"kubesandbox-timeout-0123456789abcdef", "M", "m'a\"rk", "\xfe"}) {
                EXPECT_EQ(rp::execute_command_body(command, marker, timeout),
                          rp::execute_body(rp::execute_argv(command, marker, timeout)))
                    << command << " / " << marker << " / " << timeout;
            }
        }
    }
    // Its own output: valid JSON whose command line ends with the quoted arguments.
    auto body = boost::json::parse(rp::execute_command_body("echo 'hi'", "M", 3));
    std::string line(body.at("command").as_string());
    EXPECT_EQ(line.rfind("'sh' '-c' 'm=$1;", 0), 0u) << line;
    EXPECT_TRUE(line.ends_with(R"( 'sh' 'M' '3' 'echo '\''hi'\''')")) << line;
}

TEST(RuntimeProtocol, ReaderKeepsCappedStreamsAndTheTailOfStderr) {
    rp::ExecuteResponseReader reader(4);
    std::string body = R"({"stdout":"abcdefgh","stderr":"0123456789\u00e9","exit_code":3,"extra":{"stdout":"x"}})";
    for (char c : body) ASSERT_TRUE(reader.write(std::string_view(&c, 1)));
    ASSERT_TRUE(reader.finish());
    EXPECT_EQ(reader.stdout_text(), "abcd");
    EXPECT_EQ(reader.stderr_text(), "0123");
    EXPECT_EQ(reader.stderr_tail(), "0123456789\xc3\xa9");
    EXPECT_EQ(reader.exit_code(), 3);
    EXPECT_TRUE(reader.truncated());

    // A member whose value is an object or array does not swallow the next member's key.
    rp::ExecuteResponseReader nested(10);
    ASSERT_TRUE(nested.write(R"({"extra":{},"stdout":"a","list":[1],"exit_code":3,"stderr":"b"})") && nested.finish());
    EXPECT_EQ(nested.stdout_text(), "a");
    EXPECT_EQ(nested.stderr_text(), "b");
    EXPECT_EQ(nested.exit_code(), 3);

    rp::ExecuteResponseReader bad(10);
    EXPECT_FALSE(bad.write("{\"stdout\": tru") && bad.write("x}") && bad.finish());
    rp::ExecuteResponseReader cut(10);
    EXPECT_TRUE(cut.write(R"({"stdout":"a")"));
    EXPECT_FALSE(cut.finish());
    rp::ExecuteResponseReader array(10);
    EXPECT_TRUE(array.write("[1]"));
    EXPECT_FALSE(array.finish());
}

TEST(RuntimeProtocol, DecodesTheWrappedRun) {
    const std::string m = "kubesandbox-timeout-0123456789abcdef";
    // "hi\n" and "\xff" base64-encoded, then the trailer.
    auto r = rp::decode_run("aGkK\n", "/w==\n\n" + m + "-base64 7\n", "/w==\n\n" + m + "-base64 7\n", false, m);
    EXPECT_FALSE(r.plain || r.malformed || r.timed_out);
    EXPECT_EQ(r.stdout_bytes, "hi\n");
    EXPECT_EQ(r.stderr_bytes, "\xff");
    EXPECT_EQ(r.exit_code, 7);
    r = rp::decode_run("aGkK", "\n" + m + "-timeout\n", "\n" + m + "-timeout\n", false, m);
    EXPECT_TRUE(r.timed_out);
    r = rp::decode_run("plain", "text", "text", false, m);
    EXPECT_TRUE(r.plain);
    EXPECT_EQ(r.stdout_bytes, "plain");
    // Capped: a partial base64 group is dropped; the trailer survives in the tail.
    r = rp::decode_run("aGVsbG8gd29y", "d2", "d2\n" + m + "-base64 0\n", true, m);
    EXPECT_EQ(r.stdout_bytes, "hello wor");
    EXPECT_EQ(r.stderr_bytes, "");
    EXPECT_TRUE(r.truncated);
    // The cap cut stderr inside the trailer's first letters, which read as base64: not output.
    r = rp::decode_run("aGkK\n", "/w==\n\n" + m.substr(0, 5), "/w==\n\n" + m + "-base64 7\n", true, m);
    EXPECT_FALSE(r.malformed);
    EXPECT_EQ(r.stderr_bytes, "\xff");
    EXPECT_EQ(r.exit_code, 7);
    r = rp::decode_run("not base64!", "\n" + m + "-base64 0\n", "\n" + m + "-base64 0\n", false, m);
    EXPECT_TRUE(r.malformed);
    // A marker the command printed itself in the middle of stderr is not a trailer.
    r = rp::decode_run("", m + "-timeout\nmore\n", m + "-timeout\nmore\n", false, m);
    EXPECT_TRUE(r.plain && !r.timed_out);
}

// With the body's size known, a large stream's text is sized once for the rest of the body,
// not regrown (a regrowth holds the old and the new buffer at once).
TEST(RuntimeProtocol, ALargeStreamIsSizedOnceFromTheBodysLength) {
    const std::string text(3'000'001, 'Q');
    const std::string body = R"({"stdout":")" + text + R"(","stderr":"","exit_code":0})";
    rp::ExecuteResponseReader reader(16 * 1024 * 1024);
    reader.expect_body(body.size());
    for (std::size_t at = 0; at < body.size(); at += 65536)
        ASSERT_TRUE(reader.write(std::string_view(body).substr(at, 65536)));
    ASSERT_TRUE(reader.finish());
    EXPECT_TRUE(reader.stdout_text() == text);
    EXPECT_LE(reader.stdout_text().capacity(), body.size());
    // Without a size, or past the cap, it is read as before.
    rp::ExecuteResponseReader capped(1000);
    capped.expect_body(body.size());
    ASSERT_TRUE(capped.write(body));
    ASSERT_TRUE(capped.finish());
    EXPECT_EQ(capped.stdout_text().size(), 1000u);
    EXPECT_LE(capped.stdout_text().capacity(), 1000u + 64);
    EXPECT_TRUE(capped.truncated());
    // A short stdout before a long stderr: only the long stream is sized for the rest.
    for (const std::string out : {"", "short"}) {
        const std::string err_first = R"({"stdout":")" + out + R"(","stderr":")" + text + R"(","exit_code":1})";
        rp::ExecuteResponseReader reader2(16 * 1024 * 1024);
        reader2.expect_body(err_first.size());
        for (std::size_t at = 0; at < err_first.size(); at += 65536)
            ASSERT_TRUE(reader2.write(std::string_view(err_first).substr(at, 65536)));
        ASSERT_TRUE(reader2.finish());
        EXPECT_EQ(reader2.stdout_text(), out);
        EXPECT_LT(reader2.stdout_text().capacity(), 64u);
        EXPECT_TRUE(reader2.stderr_text() == text);
        EXPECT_LE(reader2.stderr_text().capacity(), err_first.size());
    }
}

// A large output is decoded where its base64 text lies: the result is the same buffer, so the
// output is not held twice while it is decoded.
TEST(RuntimeProtocol, DecodesALargeOutputInItsOwnBuffer) {
    const std::string m = "kubesandbox-timeout-0123456789abcdef";
    std::string data(2'000'003, '\0');
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>((i * 7919) >> 3);
    std::string text;
    const std::string encoded = kubesandbox::proto::base64_encode(data);
    for (std::size_t at = 0; at < encoded.size(); at += 76) text.append(encoded, at, 76).push_back('\n');
    const char* buffer = text.data();
    auto r = rp::decode_run(std::move(text), "\n" + m + "-base64 0\n", "\n" + m + "-base64 0\n", false, m);
    ASSERT_FALSE(r.malformed || r.plain);
    EXPECT_TRUE(r.stdout_bytes == data);
    EXPECT_EQ(r.stdout_bytes.data(), buffer);
}

TEST(RuntimeProtocol, ComposesAndCapsOutput) {
    auto c = rp::compose_output("out\n", "err\n", false, 100);
    EXPECT_EQ(c.output, "out\n\nerr\n");
    EXPECT_FALSE(c.truncated);
    c = rp::compose_output("ab\xc3\xa9", "", false, 3);  // é would be cut in half
    EXPECT_EQ(c.output, "ab");
    EXPECT_TRUE(c.truncated);
    c = rp::compose_output("\xff\xfe\xfd\xfc", "", false, 3);  // bytes are cut where the cap is
    EXPECT_EQ(c.output, "\xff\xfe\xfd");
}

TEST(RuntimeProtocol, RuntimeFailuresAndItsOwnTimeout) {
    EXPECT_EQ(rp::runtime_failure("Failed to execute command: No closing quotation", 1), "No closing quotation");
    EXPECT_EQ(rp::runtime_failure("Failed to execute command: x", 2), "");
    EXPECT_EQ(rp::runtime_failure("other", 1), "");
    EXPECT_EQ(rp::runtime_timeout_seconds("Command '['sleep', '15']' timed out after 10.0 seconds"), 10);
    EXPECT_EQ(rp::runtime_timeout_seconds("Command '['sh']' timed out after 300.0 seconds"), 300);
    EXPECT_FALSE(rp::runtime_timeout_seconds("No closing quotation"));
    EXPECT_FALSE(rp::runtime_timeout_seconds("Command 'x' timed out after 5"));
}

TEST(RuntimeProtocol, ChoosesTheEndpointsOnlyForNamesTheRuntimeReadsBack) {
    EXPECT_EQ(rp::runtime_relative_name("/app", "/app/a/b.txt"), "a/b.txt");
    EXPECT_EQ(rp::runtime_relative_name("/app/", "/app/ü.txt"), "ü.txt");
    EXPECT_EQ(rp::runtime_relative_name("/", "/etc/x"), "etc/x");
    for (std::string p : {"/app", "/app/", "/apps/x", "/tmp/x", "/app/a%2Fb", "/app/q\"x", "/app/a\nb", "/app/a\\b",
                          "/app/../etc/x", "/app/./x", "/app//x", "/app/\xff", "relative"})
        EXPECT_FALSE(rp::runtime_relative_name("/app", p)) << p;
}

TEST(RuntimeProtocol, ReadsTheRuntimesListingsAndExistenceAnswers) {
    EXPECT_EQ(rp::runtime_view_segment("/app", "/app"), ".");
    EXPECT_EQ(rp::runtime_view_segment("/app/", "/app/"), ".");
    EXPECT_EQ(rp::runtime_view_segment("/app", "/app/d ir/ü"), "d%20ir%2F%C3%BC");
    EXPECT_EQ(rp::runtime_view_segment("/app", "/app/d/"), "d");
    for (std::string p : {"/apps", "/tmp", "/app/a%2Fb", "/app/../etc", "relative", ""})
        EXPECT_FALSE(rp::runtime_view_segment("/app", p)) << p;

    auto listing = rp::parse_listing(R"([{"name":"a.txt","size":5,"type":"file","mod_time":1787392800.25},
        {"name":"d","size":4096,"type":"directory","mod_time":1787392801}])");
    ASSERT_TRUE(listing);
    EXPECT_EQ(*listing, (std::vector<kubesandbox::RuntimeEntry>{{"a.txt", 5, false, 1787392800.25},
                                                                {"d", 4096, true, 1787392801.0}}));
    EXPECT_TRUE(rp::parse_listing("[]") && rp::parse_listing("[]")->empty());
    for (std::string_view bad :
         {"", "{}", "[1]", R"([{"size":1,"type":"file"}])", R"([{"name":"x","size":-1,"type":"file"}])",
          R"([{"name":"x","size":1,"type":"link"}])", R"([{"name":"x","size":"1","type":"file"}])",
          R"([{"name":"x","size":1,"type":"file","mod_time":"now"}])", R"([{"name":"x","size":1,"type":"file"})"})
        EXPECT_FALSE(rp::parse_listing(bad)) << bad;

    EXPECT_EQ(rp::parse_exists(R"({"path":"a","exists":true})"), true);
    EXPECT_EQ(rp::parse_exists(R"({"path":"a","exists":false})"), false);
    for (std::string_view bad : {"", "[]", R"({"path":"a"})", R"({"exists":"true"})", R"({"exists":1})"})
        EXPECT_FALSE(rp::parse_exists(bad)) << bad;
}

TEST(RuntimeProtocol, MultipartAndTransferResults) {
    auto m = rp::multipart_file("a/b.txt", "da\0ta"s, "BOUND");
    EXPECT_EQ(m.content_type, "multipart/form-data; boundary=BOUND");
    EXPECT_EQ(
        m.body,
        "--BOUND\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a/b.txt\"\r\n\r\nda\0ta\r\n--BOUND--\r\n"s);
    // Sent as read: the same bytes around the file's.
    auto frame = rp::multipart_frame("a/b.txt", "BOUND");
    EXPECT_EQ(frame.content_type, m.content_type);
    EXPECT_EQ(frame.before + "da\0ta"s + frame.after, m.body);
    // A download piece: the file's size on a line (busybox pads it), then base64.
    auto piece = rp::parse_download_piece("   5\naGVs\nbG8=\n");
    EXPECT_TRUE(piece && piece->file_size == 5 && piece->bytes == "hello");
    auto empty = rp::parse_download_piece("0\n");
    EXPECT_TRUE(empty && empty->file_size == 0 && empty->bytes.empty());
    for (std::string_view bad : {"", "aGVsbG8=", "x5\naGVsbG8=", "5\n!!", "-1\n", "99999999999999999999999\n"})
        EXPECT_FALSE(rp::parse_download_piece(bad)) << bad;
    EXPECT_EQ(kubesandbox::transfer_error(0, ""), std::nullopt);
    EXPECT_EQ(kubesandbox::transfer_error(20, ""), "permission_denied");
    EXPECT_EQ(kubesandbox::transfer_error(21, ""), "is_directory");
    EXPECT_EQ(kubesandbox::transfer_error(22, ""), "file_not_found");
    EXPECT_EQ(kubesandbox::transfer_error(23, ""), "file_too_large");
    EXPECT_EQ(kubesandbox::transfer_error(5, "boom\n"), "transfer failed (exit code 5): boom");
    auto up = rp::upload_piece_argv("/p", "\x01", true);
    EXPECT_EQ(up.size(), 7u);
    EXPECT_EQ(up[5], "AQ==");
    EXPECT_EQ(up[6], "1");
}

// The reader's check for bytes after the document: anything but whitespace is refused in any
// split, whitespace is accepted. (The input that made whole and split reads disagree is the
// fuzz seed regression-trailing-bytes; this test passes on the previous reader too.)
TEST(RuntimeProtocol, BytesAfterTheDocumentAreMalformedInAnySplit) {
    const std::string body = "{\"exit_code\":0}"s + '\0' + "x";
    for (std::size_t step = 1; step <= body.size(); ++step) {
        rp::ExecuteResponseReader reader(64);
        bool ok = true;
        for (std::size_t at = 0; at < body.size() && ok; at += step) ok = reader.write(body.substr(at, step));
        EXPECT_FALSE(ok && reader.finish()) << step;
    }
    rp::ExecuteResponseReader spaced(64);
    EXPECT_TRUE(spaced.write("{\"exit_code\":0}\n"));
    EXPECT_TRUE(spaced.write(" \r\n"));
    EXPECT_TRUE(spaced.finish());
    EXPECT_EQ(spaced.exit_code(), 0);
}
