import FoundationEssentials
import LinuxReachability

/// `PATTERN=TYPE` rules from `--classify` and classify.conf files.
enum ClassifyRules {
    /// A rule that could not be parsed; `description` names where it came from.
    struct RuleError: Error, Equatable, CustomStringConvertible {
        /// `--classify` or `file:line`.
        var source: String
        /// What is wrong with it.
        var reason: String

        var description: String { "\(source): \(reason)" }
    }

    /// The classify.conf files in precedence order: the user's, then the system's.
    static func configurationFiles(environment: [String: String]) -> [String] {
        ConfigurationFiles.named("classify.conf", environment: environment)
    }

    /// Parses one `PATTERN=TYPE` with the library's parser, keeping where it came from apart.
    static func parseRule(_ text: String, source: String) throws(RuleError) -> ClassificationOverride {
        do {
            return try ClassificationOverride(parsing: text, source: source)
        } catch {
            let prefix = "\(source): "
            let reason = error.description.hasPrefix(prefix) ? String(error.description.dropFirst(prefix.count)) : error.description
            throw RuleError(source: source, reason: reason)
        }
    }

    /// Parses a classify.conf text: blank lines and `#` comments (whole-line, or after a space) are skipped.
    static func parseFile(_ text: String, path: String) throws(RuleError) -> [ClassificationOverride] {
        var rules: [ClassificationOverride] = []
        for (offset, rawLine) in lines(of: text).enumerated() {
            var line = Substring(rawLine)
            if let comment = line.commentStart { line = line[..<comment] }
            let content = line.trimmingWhitespace()
            if content.isEmpty { continue }
            rules.append(try parseRule(content, source: "\(path):\(offset + 1)"))
        }
        return rules
    }
}

/// Lines split at LF, keeping empty ones for line numbers. Swift treats CRLF as one Character,
/// so it has to be named as a separator of its own.
private func lines(of text: String) -> [Substring] {
    text.split(omittingEmptySubsequences: false) { $0 == "\n" || $0 == "\r\n" }
}

private extension Substring {
    /// Where a `#` comment starts: at the beginning or after whitespace (so `eth#1` stays a name).
    var commentStart: Index? {
        var previous: Character?
        for index in indices {
            if self[index] == "#", previous == nil || previous!.isWhitespace { return index }
            previous = self[index]
        }
        return nil
    }
}
