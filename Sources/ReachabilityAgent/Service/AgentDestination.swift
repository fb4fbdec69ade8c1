import FoundationEssentials

/// Where the agent may put a download. A control request names a URL and perhaps an output
/// path; neither is trusted: file names taken from URLs are percent-decoded then sanitized, and
/// an output path must lie in `STATE_DIR/files` or a `download-dir=` of `agent.conf`. Pure.
package enum AgentDestination {
    /// A file name from the URL's last path component: percent-decoded, then made safe: no `/`,
    /// `\` or control characters (replaced by `_`), no leading dots, at most 200 bytes;
    /// `index.html` when nothing is left.
    package static func fileName(for url: URL) -> String {
        let raw = url.path.split(separator: "/", omittingEmptySubsequences: true).last.map(String.init) ?? ""
        let decoded = percentDecoded(raw)
        var name = String(decoded.unicodeScalars.map { scalar -> Character in
            if scalar == "/" || scalar == "\\" || scalar.value < 0x20 || scalar.value == 0x7F
                || (0x80...0x9F).contains(scalar.value) || scalar.properties.generalCategory == .format {
                return "_"
            }
            return Character(scalar)
        })
        while name.hasPrefix(".") { name.removeFirst() }
        while name.utf8.count > 200 { name.removeLast() }
        while name.first == " " || name.first == "\t" { name.removeFirst() }
        while name.last == " " || name.last == "\t" { name.removeLast() }
        return name.isEmpty ? "index.html" : name
    }

    /// `%XX` sequences decoded as UTF-8 (invalid sequences become U+FFFD); without Foundation.
    package static func percentDecoded(_ text: String) -> String {
        var bytes: [UInt8] = []
        var utf8 = Array(text.utf8)[...]
        while let byte = utf8.popFirst() {
            if byte == UInt8(ascii: "%"), utf8.count >= 2,
               let value = UInt8(String(decoding: utf8.prefix(2), as: UTF8.self), radix: 16) {
                bytes.append(value)
                utf8 = utf8.dropFirst(2)
            } else {
                bytes.append(byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// `path` when it is absolute and has no empty, `.` or `..` components (trailing `/` dropped).
    package static func normalizedAbsolutePath(_ path: String) -> String? {
        guard path.hasPrefix("/"), !path.utf8.contains(0) else { return nil }
        var components = path.split(separator: "/", omittingEmptySubsequences: false).dropFirst()
        if components.last == "" { components = components.dropLast() }
        guard !components.contains(where: { $0.isEmpty || $0 == "." || $0 == ".." }) else { return nil }
        return "/" + components.joined(separator: "/")
    }

    /// The destination for a request: `output` when it is inside an allowed directory, else the
    /// URL's sanitized name in `filesDirectory`.
    package static func resolve(output: String?, url: URL, filesDirectory: String, allowed: [String]) -> Result<String, ControlError> {
        guard let output else { return .success(filesDirectory + "/" + fileName(for: url)) }
        guard let path = normalizedAbsolutePath(output), path != "/" else {
            return .failure(.invalidArgument("'output' must be an absolute path without . or .. components"))
        }
        let name = path.split(separator: "/").last.map(String.init) ?? ""
        guard !name.hasSuffix(".part"), name.utf8.count <= 255,
              !name.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else {
            return .failure(.invalidArgument("'\(name)' is not a usable file name"))
        }
        guard isAllowed(path, filesDirectory: filesDirectory, allowed: allowed) else {
            let roots = [filesDirectory] + allowed
            return .failure(.invalidArgument("'\(path)' is outside the agent's download directories (\(roots.joined(separator: ", "))); the agent's owner can add one with a download-dir= line in agent.conf"))
        }
        return .success(path)
    }

    /// Whether `path` (absolute, normalised) lies inside `filesDirectory` or an `allowed`
    /// directory: the rule for `queue add -o`, and for every record the agent restores.
    static func isAllowed(_ path: String, filesDirectory: String, allowed: [String]) -> Bool {
        guard normalizedAbsolutePath(path) == path else { return false }
        return ([filesDirectory] + allowed).contains { path.hasPrefix($0 == "/" ? "/" : $0 + "/") }
    }
}
