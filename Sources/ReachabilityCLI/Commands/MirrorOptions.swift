import FoundationEssentials
import ResumableDownloads

/// `download`'s sources of one file (issue 34): `URL URL... --same-file`, or one URL with
/// `--mirror URL` (repeatable). Read once, with the checks between them.
struct MirrorOptions: Sendable, Equatable {
    static let mirror = Option.repeating(
        "mirror", valueName: "url",
        help: "Another source of the same file (repeatable): ranges are fetched from every source at once while they are proven the same file, else the sources are tried in the order given when the one in use fails.")
    static let sameFile = Option.flag(
        "same-file", help: "The URLs given are sources of one file (mirrors), not several files: it is named after the first, and the others are tried in order when the one in use fails.")

    /// `download --help`'s paragraph on mirrors.
    static let discussion = """
        Mirrors (--mirror, --same-file) are used at once, ranges from each (faster ones get more), \
        while they are proven the same file: --sha256 or a Metalink's hashes given (pieces are \
        checked as they land), or else each range from a mirror must carry the first URL's strong \
        validator and length. A mirror whose bytes fail a piece hash, or differ from another \
        source's, is dropped ('sourceDropped' event, with why) and its bytes fetched again from \
        the others. Otherwise, and after a file failed --sha256 as a whole, mirrors are used one \
        at a time, in the order given: the next one \
        takes over when the source in use answers an HTTP error (a 5xx at once, without waiting \
        out its back-off), does not answer while the network \
        path works, sends a file that fails --sha256 (its bytes are discarded and fetched again \
        from the next), or fails otherwise; a 'sourceChanged' event names the source left and why. \
        Bytes already stored are kept across a change only when the next source serves the same \
        length and validator (If-Range), else that source starts over: files from different \
        servers are never spliced. Give --sha256 with mirrors: it is the only check that catches a \
        mirror serving other bytes.
        """

    /// Whether the positional URLs are one file.
    var isSameFile: Bool
    /// The sources after the first, in the order they are tried.
    var mirrors: [URL]
    /// The file's name when it is not the first URL's (a Metalink's checked `name`).
    var fileName: String?

    init(isSameFile: Bool = false, mirrors: [URL] = []) {
        self.isSameFile = isSameFile
        self.mirrors = mirrors
    }

    init(arguments: ParsedArguments, urls: [URL]) throws {
        isSameFile = arguments.isSet(Self.sameFile)
        let given = try arguments.urls(Self.mirror)
        if isSameFile && urls.count < 2 && given.isEmpty {
            throw UsageError("'\(Self.sameFile.synopsis)' needs two or more URLs (the sources of one file)")
        }
        if !given.isEmpty && urls.count > 1 && !isSameFile {
            throw UsageError("'\(Self.mirror.synopsis)' names another source of one file, but \(urls.count) URLs were given; "
                             + "give one URL, or '\(Self.sameFile.synopsis)' when they are all the same file")
        }
        if !given.isEmpty { isSameFile = true }
        var sources: [URL] = []
        for url in (isSameFile ? Array(urls.dropFirst()) : []) + given where url != urls.first && !sources.contains(url) {
            sources.append(url)
        }
        mirrors = sources
    }
}

/// Which source of a file a download uses, and when it moves to the next (pure: fed the
/// download's events, tested without sockets). One source at a time, in the order given, each
/// tried once; the last keeps the download's own behaviour (it waits for a silent server, it
/// fails for good on an HTTP error).
struct MirrorFailover: Sendable, Equatable {
    /// The source in use.
    private(set) var current: URL
    /// Sources not tried yet, in order.
    private(set) var untried: [URL]

    init(primary: URL, mirrors: [URL]) {
        current = primary
        untried = mirrors
    }

    /// What to do after an event of the download from `current`.
    enum Decision: Sendable, Equatable {
        /// Report the event; the source stays.
        case stay
        /// Leave `current` (stopping the download if it still runs) for `next`, saying `reason`;
        /// the event is not reported as the download's end.
        case change(to: URL, reason: String)
    }

    mutating func handle(_ event: DownloadEvent) -> Decision {
        guard !untried.isEmpty else { return .stay }
        let reason: String
        switch event {
        case .failed(let error) where Self.isSourceProblem(error):
            reason = error == .checksumMismatch
                ? "\(error.description); its bytes were discarded" : error.description
        case .waitingForServer(let error):
            // The path works but this server does not answer: another may.
            reason = "it does not answer (\(error.description))"
        case .retrying(_, let error) where error.httpStatusCode != nil:
            // A 5xx, 408 or 429 the engine would wait out with back-off: another server may not be busy.
            reason = error.description
        default:
            return .stay
        }
        current = untried.removeFirst()
        return .change(to: current, reason: reason)
    }

    /// Whether another source may succeed where this failure happened: the server's doing (an
    /// HTTP error, a bad or short reply, a refused connection, a file failing --sha256), not the
    /// disk's, the destination's or the user's.
    /// Leaves `current` for the next source after a problem found outside the download's
    /// events (a Metalink piece failing its hash); nil when no source is left.
    mutating func leave() -> URL? {
        guard !untried.isEmpty else { return nil }
        current = untried.removeFirst()
        return current
    }

    static func isSourceProblem(_ error: DownloadError) -> Bool {
        ![DownloadError.diskFull, .fileSystem, .cancelled, .destinationExists, .destinationInUse,
          .untrustedFile, .invalidRequest].contains(error)
    }
}
