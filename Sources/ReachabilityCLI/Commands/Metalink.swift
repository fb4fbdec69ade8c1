import FoundationEssentials
import ReachabilityBase
import ResumableDownloads

/// The one file a Metalink 4 document (RFC 5854) describes, read once into checked values:
/// `download --metalink FILE`. Only what the download uses is kept: the name, the size, the
/// whole-file SHA-256, SHA-256 piece hashes and the http(s) URLs in priority order.
struct Metalink: Sendable, Equatable {
    /// One `<url>`.
    struct Source: Sendable, Equatable {
        var url: URL
        /// RFC 5854's 1 (first) to 999999; nil when not given (tried after those with one).
        var priority: Int?
        /// The ISO 3166-1 country code the mirror says it is in, lowercased.
        var location: String?
    }

    /// `<pieces length type="sha-256">`: the file in `length`-byte pieces, each with its digest.
    struct Pieces: Sendable, Equatable {
        var length: Int64
        /// Normalized (lowercase) hex digests, in file order.
        var sha256: [String]

        /// The byte range of piece `index` in a file of `size` bytes.
        func range(of index: Int, size: Int64) -> Range<Int64> {
            let start = Int64(index) * length
            return start..<min(start + length, size)
        }
    }

    /// `<file name>` as written (it may hold a directory part; see `plainFileName`).
    var name: String
    var size: Int64?
    /// The whole file's SHA-256, normalized hex.
    var sha256: String?
    var pieces: Pieces?
    /// The http and https sources, by priority (ties in document order).
    var sources: [Source]
    /// What of the document is not used, for the user to read (`<url>`s of other schemes, piece
    /// hashes that cannot be placed).
    var notes: [String] = []

    /// Largest size believed: 1 PiB (anything larger is a hostile or broken file).
    static let maximumSize: Int64 = 1 << 50
    static let maximumSources = 256
    static let namespace = "urn:ietf:params:xml:ns:metalink"

    /// A document that cannot be used, with what is wrong.
    struct Failure: Error, Sendable, Equatable, CustomStringConvertible {
        var description: String
    }

    // Over 60 lines on purpose: every element of <file> read and checked in one place.
    /// Reads a Metalink 4 document.
    init(parsing bytes: [UInt8]) throws(Failure) {
        let root: MetalinkXMLReader.Element
        do {
            root = try MetalinkXMLReader.parse(bytes)
        } catch {
            throw Failure(description: "not a readable Metalink: \(error.description)")
        }
        guard root.localName == "metalink" else {
            throw Failure(description: "not a Metalink: the root element is <\(root.name)>")
        }
        guard root.attributes.first(where: { $0.key == "xmlns" || $0.key.hasPrefix("xmlns:") })?.value == Self.namespace else {
            throw Failure(description: "not a Metalink 4 document (RFC 5854, namespace \(Self.namespace)); Metalink 3 is not supported")
        }
        let files = root.children.filter { $0.localName == "file" }
        guard files.count == 1 else {
            throw Failure(description: files.isEmpty ? "it describes no <file>"
                : "it describes \(files.count) files; only a Metalink with one file is supported")
        }
        let file = files[0]
        guard let name = file.attributes["name"], !name.isEmpty else {
            throw Failure(description: "its <file> has no name")
        }
        self.name = name
        if let element = try file.single("size") {
            guard let value = Self.decimal(element.text), value <= Self.maximumSize else {
                throw Failure(description: "its <size> '\(element.text.trimmed.prefix(40))' is not a byte count up to 1 PiB")
            }
            size = value
        } else {
            size = nil
        }
        let wholeHashes = file.children.filter { $0.localName == "hash" && $0.attributes["type"]?.lowercased() == "sha-256" }
        guard wholeHashes.count <= 1 else { throw Failure(description: "it gives more than one sha-256 <hash>") }
        if let element = wholeHashes.first {
            sha256 = try Self.digest(element.text, what: "<hash type=\"sha-256\">")
        } else {
            sha256 = nil
        }
        pieces = try Self.pieces(of: file, size: size)
        if pieces != nil, size == nil {
            // Piece hashes cannot be checked without the length: the last piece's end is unknown,
            // and a file cut short (or grown) would pass every piece it has.
            guard sha256 != nil else {
                throw Failure(description: "its sha-256 <pieces> cannot be checked without the file's <size>, and it gives no whole-file sha-256 <hash>; add a <size> or a <hash type=\"sha-256\">")
            }
            pieces = nil
            notes.append("its sha-256 <pieces> are ignored: without a <size> they cannot be checked; the whole-file SHA-256 checks the file")
        }
        let (sources, skipped) = try Self.sources(of: file)
        self.sources = sources
        if !skipped.isEmpty {
            let schemes = Set(skipped).sorted().map { $0 + ":" }.joined(separator: ", ")
            notes.append("\(skipped.count) <url>\(skipped.count == 1 ? "" : "s") skipped, never fetched (\(schemes)): only http and https are downloaded")
        }
    }

    /// The document's http and https `<url>`s with their priority and location, best first, and
    /// the schemes of the others (`file:`, `magnet:`, `ftp:`), which are skipped: never fetched,
    /// nor read as a path. A document with no http or https `<url>` is refused.
    private static func sources(of file: MetalinkXMLReader.Element) throws(Failure) -> (sources: [Source], skipped: [String]) {
        var sources: [Source] = []
        var skipped: [String] = []
        for element in file.children where element.localName == "url" {
            let text = element.text.trimmed
            // The scheme is read first: `magnet:?xt=...` and `file:///x` have no host, and are
            // skipped, not refused as broken.
            if let scheme = Self.scheme(of: text), scheme != "http", scheme != "https" {
                skipped.append(scheme)
                continue
            }
            guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), let host = url.host, !host.isEmpty,
                  scheme == "http" || scheme == "https" else {
                throw Failure(description: "its <url> '\(URLRedaction.redacted(String(text.prefix(200))))' is not a URL")
            }
            var priority: Int?
            if let given = element.attributes["priority"] {
                guard let value = Self.priorityValue.value(from: given) else {
                    throw Failure(description: "a <url> priority '\(given.prefix(20))' is not \(Self.priorityValue.expectation)")
                }
                priority = value
            }
            var location: String?
            if let given = element.attributes["location"] {
                guard given.count == 2, given.allSatisfy({ $0.isASCII && $0.isLetter }) else {
                    throw Failure(description: "a <url> location '\(given.prefix(20))' is not a two-letter country code")
                }
                location = given.lowercased()
            }
            guard !sources.contains(where: { $0.url == url }) else { continue }
            sources.append(Source(url: url, priority: priority, location: location))
            guard sources.count <= Self.maximumSources else {
                throw Failure(description: "it lists more than \(Self.maximumSources) URLs")
            }
        }
        guard !sources.isEmpty else {
            throw Failure(description: skipped.isEmpty ? "it has no <url>"
                : "it has no http or https <url> (only those are supported; \(Set(skipped).sorted().map { $0 + ":" }.joined(separator: ", ")) skipped)")
        }
        // A stable sort: equal priorities keep the document's order.
        let sorted = sources.enumerated().sorted {
            ($0.element.priority ?? 1_000_000, $0.offset) < ($1.element.priority ?? 1_000_000, $1.offset)
        }.map(\.element)
        return (sorted, skipped)
    }

    /// The lowercased scheme of a URL's text (RFC 3986: a letter, then letters, digits, `+-.`,
    /// then `:`), nil when it has none.
    static func scheme(of text: String) -> String? {
        guard let colon = text.firstIndex(of: ":") else { return nil }
        let scheme = text[..<colon]
        guard let first = scheme.first, first.isASCII, first.isLetter, scheme.count <= 32,
              scheme.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "+-.".contains($0)) }) else { return nil }
        return scheme.lowercased()
    }

    /// `<pieces>` with SHA-256 digests; pieces of other types (sha-1) are left out, the whole
    /// file's hash then being the check.
    private static func pieces(of file: MetalinkXMLReader.Element, size: Int64?) throws(Failure) -> Pieces? {
        let all = file.children.filter { $0.localName == "pieces" }
        guard let element = all.first(where: { $0.attributes["type"]?.lowercased() == "sha-256" }) else { return nil }
        guard let text = element.attributes["length"], let length = decimal(text), (1...maximumSize).contains(length) else {
            throw Failure(description: "its <pieces> length is not a byte count from 1 to 1 PiB")
        }
        var digests: [String] = []
        for hash in element.children where hash.localName == "hash" {
            digests.append(try digest(hash.text, what: "piece hash \(digests.count)"))
        }
        guard !digests.isEmpty else { throw Failure(description: "its <pieces> lists no <hash>") }
        if let size {
            let expected = size == 0 ? 0 : (size - 1) / length + 1
            guard Int64(digests.count) == expected else {
                throw Failure(description: "its <pieces> lists \(digests.count) hashes, but a \(size)-byte file has \(expected) pieces of \(length) bytes")
            }
        }
        return Pieces(length: length, sha256: digests)
    }

    /// 64 hex digits, normalized.
    private static func digest(_ text: String, what: String) throws(Failure) -> String {
        guard let digest = SHA256.normalizedHexDigest(text.trimmed) else {
            throw Failure(description: "its \(what) '\(text.trimmed.prefix(80))' is not 64 hexadecimal digits")
        }
        return digest
    }

    /// Decimal digits only (surrounding whitespace allowed, as XML text has): no sign, no overflow.
    static func decimal(_ text: String) -> Int64? { DecimalText.integer(text.trimmed) }

    /// RFC 5854's `priority` range.
    static let priorityValue = Count(1...999_999)

    /// The name as a file name in one directory: nil when it has a directory part (`a/b`, `../x`,
    /// RFC 5854 allows relative paths), is `.` or `..`, has control characters or is longer than
    /// 255 bytes. The name is never used as a path: the caller then asks for -o.
    static func plainFileName(_ name: String) -> String? {
        guard !name.isEmpty, name.utf8.count <= 255, name != ".", name != "..", !name.contains("/"),
              !name.unicodeScalars.contains(where: { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) }) else { return nil }
        return name
    }
}

private extension MetalinkXMLReader.Element {
    /// The one child of this local name; a second is refused.
    func single(_ localName: String) throws(Metalink.Failure) -> MetalinkXMLReader.Element? {
        let matches = children.filter { $0.localName == localName }
        guard matches.count <= 1 else { throw Metalink.Failure(description: "its <file> has more than one <\(localName)>") }
        return matches.first
    }
}

private extension String {
    var trimmed: String {
        String(drop(while: \.isWhitespace).reversed().drop(while: \.isWhitespace).reversed())
    }
}
