import FoundationEssentials
import ResumableDownloads

/// Values several commands read with the same check (`download`, `upload`, `queue add`): one
/// reading each, so a value one command refuses is refused by the others with the same words.
extension ParsedArguments {
    /// The `name: value` lines given to a repeatable `-H` option (`download`'s, `upload`'s), each
    /// checked by `HeaderValidation` with the names the command sets itself refused; a bad line
    /// is a usage error naming it.
    func headerLines(_ option: Option, reserved: Set<String>) throws -> [String] {
        try values(option).map { line in
            if let problem = HeaderValidation.problem(with: line, reserved: reserved) {
                throw UsageError.invalidValue(line, for: option, problem)
            }
            return line
        }
    }

    /// The http(s) URLs given to a repeatable option (`--mirror` of `download` and `queue add`),
    /// each read by `DownloadCommand.parseURL`; a bad one is a usage error, its secrets redacted.
    func urls(_ option: Option) throws -> [URL] {
        try values(option).map { text in
            do {
                return try DownloadCommand.parseURL(text)
            } catch {
                throw UsageError.invalidValue(URLRedaction.redacted(text), for: option, "expected an http or https URL")
            }
        }
    }

    /// A file or directory named by `option`, nil when not given; '' names nothing and is a
    /// usage error ("expected `what`").
    func nonEmptyValue(_ option: Option, expected what: String) throws(UsageError) -> String? {
        guard let text = value(option) else { return nil }
        guard !text.isEmpty else { throw UsageError.invalidValue(text, for: option, "expected \(what)") }
        return text
    }

    /// `--sha256 HEX` (`download`, `queue add`) as `SHA256.normalizedHexDigest` gives it; nil
    /// when not given.
    func sha256Digest(_ option: Option) throws -> String? {
        guard let hex = value(option) else { return nil }
        guard let digest = SHA256.normalizedHexDigest(hex) else {
            throw UsageError.invalidValue(hex, for: option, "expected 64 hexadecimal digits")
        }
        return digest
    }
}
