// edit(): DeepAgents 0.7.8's replacement rules on the file's bytes. Sans-IO.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kubesandbox::files {

struct EditOutcome {
    // not_a_text_file, string_not_found or multiple_occurrences; empty on success.
    std::optional<std::string> code{};
    long long count{};
    std::string content{};  // the new file content on success
};

// Tries (old, new) as given, then both with CRLF line ends, then both with LF; the first variant
// found at least once is used. An empty old_string occurs len(text)+1 times (Python's count).
EditOutcome apply_edit(std::string_view content, std::string_view old_string, std::string_view new_string,
                       bool replace_all);

// The result error text for a code, worded as DeepAgents words it.
std::string edit_error_text(std::string_view code, std::string_view path, std::string_view old_string);

}  // namespace kubesandbox::files
