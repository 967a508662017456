// Where the library's diagnostics go. Components never print: they hand lines to a Logger the
// caller injects through the options of the object that owns them.
#pragma once

#include <functional>
#include <string_view>

namespace kubesandbox {

enum class LogLevel { debug, info, warning, error };

std::string_view to_string(LogLevel level) noexcept;

class Logger {
public:
    using Sink = std::function<void(LogLevel level, std::string_view message)>;

    // Lines at `min_level` and above go to stderr, prefixed "kubesandbox: ".
    Logger() = default;
    explicit Logger(LogLevel min_level) : min_level_(min_level) {}
    // Lines at `min_level` and above go to `sink` (which may be called from any thread).
    Logger(LogLevel min_level, Sink sink) : min_level_(min_level), sink_(std::move(sink)) {}

    static Logger silent() {
        return Logger(LogLevel::error, [](LogLevel, std::string_view) {});
    }

    bool enabled(LogLevel level) const noexcept { return level >= min_level_; }
    void log(LogLevel level, std::string_view message) const;
    void warning(std::string_view message) const { log(LogLevel::warning, message); }
    void info(std::string_view message) const { log(LogLevel::info, message); }

private:
    LogLevel min_level_{LogLevel::warning};
    Sink sink_{};
};

}  // namespace kubesandbox
