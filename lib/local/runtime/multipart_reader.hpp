// multipart/form-data bodies for the local sandbox runtime's POST /upload, read as they arrive:
// the runtime holds a part head and a delimiter's length of data at a time, never the body.
// Sans-IO; the server feeds it what it reads from the socket.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kubesandbox::runtime {

// The boundary parameter of a multipart/form-data Content-Type, or nullopt.
std::optional<std::string> multipart_boundary(std::string_view content_type);

// What a part's Content-Disposition says about it.
struct FormPartHead {
    std::string name;
    std::optional<std::string> filename;
};

class MultipartReader {
public:
    enum class State { reading, done, malformed };

    // Told about each part as the body is read: its head, then its data in pieces (none for an
    // empty part). A part ends where the next one begins or the body is done.
    class Events {
    public:
        virtual void on_part(const FormPartHead& head) = 0;
        virtual void on_data(std::string_view data) = 0;

    protected:
        ~Events() = default;
    };

    // A part head longer than this makes the body malformed.
    static constexpr std::size_t max_head = 64 * 1024;

    explicit MultipartReader(std::string_view boundary);

    // The next bytes of the body. Bytes after the closing delimiter are ignored.
    State feed(std::string_view bytes, Events& events);
    // The body has ended: done when the closing delimiter was read, otherwise malformed.
    State finish();
    State state() const { return state_; }

private:
    enum class Phase { preamble, after_delimiter, head, data };
    std::string delimiter_;         // "--" boundary
    std::string next_delimiter_;    // CRLF "--" boundary
    std::string pending_;           // read but not yet reported
    std::size_t head_scanned_ = 0;  // how much of a pending head holds no blank line
    Phase phase_ = Phase::preamble;
    State state_ = State::reading;
};

// One whole part, for bodies held in memory.
struct FormPart {
    std::string name;
    std::optional<std::string> filename;
    std::string data;
};

// The parts of a whole multipart body; nullopt when it is not well formed.
std::optional<std::vector<FormPart>> parse_multipart(std::string_view body, std::string_view boundary);

}  // namespace kubesandbox::runtime
