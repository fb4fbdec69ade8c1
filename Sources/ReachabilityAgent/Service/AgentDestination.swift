import FoundationEssentials
import ReachabilityBase

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
               let value = HTTPWire.percentEncodedOctet(utf8.prefix(2)) {
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
    ///
    /// `aliases` maps other spellings of a directory to the real one (the state directory as the
    /// agent was given it, when links lead from there: systemd's `DynamicUser=` makes
    /// `/var/lib/reachability` a link to `/var/lib/private/reachability`). An output under an
    /// alias is respelled under the real directory before it is checked. The aliases were
    /// resolved once, when the agent opened its state directory (following only links that root
    /// or its own user made, in directories nobody else can change), so nothing here touches
    /// the file system and a link planted later cannot widen what is allowed.
    package static func resolve(output: String?, url: URL, filesDirectory: String, allowed: [String],
                        aliases: [String: String] = [:]) -> Result<String, ControlError> {
        guard let output else { return .success(filesDirectory + "/" + fileName(for: url)) }
        guard let normalized = normalizedAbsolutePath(output), normalized != "/" else {
            return .failure(.invalidArgument("'output' must be an absolute path without . or .. components"))
        }
        let path = respelled(normalized, aliases: aliases)
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
    package static func isAllowed(_ path: String, filesDirectory: String, allowed: [String]) -> Bool {
        guard normalizedAbsolutePath(path) == path else { return false }
        return ([filesDirectory] + allowed).contains { isInside(path, $0) }
    }

    /// `path` with a leading alias directory replaced by the directory it names; unchanged when
    /// no alias is a whole-component prefix of it.
    package static func respelled(_ path: String, aliases: [String: String]) -> String {
        for (alias, real) in aliases where alias != "/" {
            if path.utf8.elementsEqual(alias.utf8) { return real }
            if isInside(path, alias) { return real + String(decoding: path.utf8.dropFirst(alias.utf8.count), as: UTF8.self) }
        }
        return path
    }

    /// Whether `path` lies below `directory`, comparing bytes as the kernel does: `String`'s own
    /// comparison treats canonically equivalent spellings (`é` and `e` + U+0301) as equal, and
    /// those name different directories on disk.
    package static func isInside(_ path: String, _ directory: String) -> Bool {
        let prefix = directory == "/" ? "/" : directory + "/"
        return path.utf8.starts(with: prefix.utf8)
    }
}
