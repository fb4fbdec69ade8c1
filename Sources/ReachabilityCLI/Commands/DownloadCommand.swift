import FoundationEssentials
import Glibc
import LinuxReachability
import LinuxSystem
import ReachabilityBase
import ResumableDownloads
import Synchronization

/// `reachability download`: fetch URLs with resume data, pausing while the network is unusable
/// and continuing from the stored offset when it comes back (or when the command is run again).
struct DownloadCommand: Command, OptionTable {
    static let name = "download"
    static let abstract = "Download URLs, waiting out network outages and resuming where they stopped."
    // One row per option, in help order; the first row reads the URLs (or the Metalink) and
    // the sources, which the options below are checked against.
    static let table: [OptionRow<Self>] = [
        .then { arguments, command in
            command.metalinkFile = try metalinkPath(arguments.positional(urls), arguments: arguments)
            command.urls = command.metalinkFile != nil ? [] : try arguments.positional(urls).map(parseURL)
            command.sources = try MirrorOptions(arguments: arguments, urls: command.urls)
        },
        .reading(.value("output", short: "o", valueName: "file", help: "Write the file here (one URL only); '-' writes it to stdout once it is complete and verified. Default: the URL's last path component.")) {
            arguments, option, command in
            command.explicitOutput = arguments.value(option)
        },
        .path("directory", short: "d", valueName: "dir", expected: "a directory", help: "Put downloaded files in this directory (default: the current directory).",
              into: \.directory),
        .then { _, command in try command.checkOutput() },
        .custom(.value("sha256", valueName: "hex", help: "The SHA-256 (64 hex digits) the file must have; with several URLs it applies to each."),
                into: \.expectedSHA256) { try $0.sha256Digest($1) },
        .flag("no-expensive", help: "Never use an expensive path (cellular-like, or a link NetworkManager reports metered such as a phone's hotspot); a transfer stops, checkpointed, the moment its path turns expensive and waits for another one.",
              clears: \.allowsExpensive),
        .flag("no-roaming", help: "Never use a modem registered on a visited network (roaming, per ModemManager); wait for another path.",
              clears: \.allowsRoaming),
        .value("connections", valueName: "n", help: "Open this many connections to one server (1-\(DownloadAgent.maximumConnectionsPerHostLimit)): all of them as soon as the server has answered a range request with a 206, as aria2c -x N. Without it: up to \(DownloadAgent.defaultConnectionsPerHost) (as a web browser), added only while each added one makes the download faster. More than one only when the server answers ranges with a validator (or --sha256 is given).",
               as: DownloadAgent.connectionsPerHostValue, into: \.maximumConnections),
        .custom(.repeating("interface", valueName: "name", help: "Download over this interface only (repeatable: the connections are spread over all those named). Default: every usable uplink when there are several, else the routing table's choice."),
                into: \.interfaces) { arguments, option in
            try arguments.values(option).map { name in
                guard NetworkInterface.isValidName(name) else {
                    throw UsageError.invalidValue(name, for: option, "expected an interface name (1-15 visible characters, no '/' or ':')")
                }
                return name
            }
        },
        .reading(.flag("expensive-as-fallback", help: "Use an expensive path only while no other path is usable (by default it is also used beside them, while it adds throughput).")) {
            arguments, option, command in
            command.usesExpensivePathsOnlyAsFallback = arguments.isSet(option)
            if command.usesExpensivePathsOnlyAsFallback && !command.allowsExpensive {
                throw UsageError("'\(option.synopsis)' and '\(Self.option("no-expensive").synopsis)' contradict each other; use one")
            }
        },
        .custom(.stateDirectory(holding: "resume data"), into: \.stateDirectoryOverride) { try $0.nonEmptyValue($1, expected: "a directory") },
        .custom(.value("max-outage", valueName: "seconds", help: "Give up (keeping the resume data, exit 75) after waiting this long for a usable path, a server that does not answer, or one that keeps answering 5xx (fractions allowed; 'inf', or more than 100 years, waits forever). Default: wait forever."),
                into: \.maximumOutageWait) { try $0.value($1, as: SecondsOrForever())?.duration },
        .flag("wait-for-space", help: "When the file would leave less than the larger of 1 GiB and 5 % of its file system free, or the disk fills, wait (checkpointed, checked every 2 s) until space returns instead of failing with exit 74.",
              sets: \.waitsForSpace),
    ] + EventOutputOptions.rows(at: \.events) + [
        .custom(.repeating("header", short: "H", valueName: "name: value", help: "Send this request header (repeatable). Range, If-Range and Accept-Encoding are the downloader's own."),
                into: \.headers) { try $0.headerLines($1, reserved: HeaderValidation.reservedNames) },
    ] + transportRows(insecure: .flag("insecure", short: "k", help: "Do not check the server's certificate (anyone on the path can then change the file; use --sha256).",
                                      clears: \.verifiesCertificates)) + [
        // Read with the URLs by the first row.
        .listed(MirrorOptions.mirror), .listed(MirrorOptions.sameFile), .listed(metalink),
    ] + MonitorOptions.rows(at: \.monitor).map {
        // `--netns` for download: the transfers run in the namespace too, not only the path monitor.
        $0.option?.name != "netns" ? $0
            : $0.described(as: "Download inside the named network namespace (see 'ip netns'), watching its path. Needs root and iproute2.")
    } + [
        .then { _, command in try command.checkStandardOutput() },
    ]

    /// The transport group's rows with `--insecure` among them, where `download --help` lists it.
    private static func transportRows(insecure: OptionRow<Self>) -> [OptionRow<Self>] {
        let transport = TransportOptions.rows(at: \Self.transport)
        return Array(transport.prefix(2)) + [insecure] + transport.dropFirst(2)
    }

    /// `-o` against the URLs and `-d`.
    private func checkOutput() throws {
        let (output, directory) = (Self.option("output"), Self.option("directory"))
        guard let explicitOutput else { return }
        if urls.count > 1, !sources.isSameFile {
            throw UsageError("'\(output.synopsis)' names one file but \(urls.count) URLs were given; use '\(directory.synopsis)' instead")
        }
        if self.directory != nil {
            throw UsageError("'\(output.synopsis)' and '\(directory.synopsis)' cannot be used together")
        }
        if explicitOutput.isEmpty || (explicitOutput.hasSuffix("/") && explicitOutput != "-") {
            throw UsageError.invalidValue(explicitOutput, for: output, "expected a file name")
        }
    }

    /// `-o -` against `--json`, and a file name for every URL without `-o`.
    private func checkStandardOutput() throws {
        let output = Self.option("output")
        if writesToStandardOutput && isJSON {
            throw UsageError("'\(output.synopsis)' '-' and '\(EventOutputOptions.option("json").synopsis)' both write to stdout; use one")
        }
        if explicitOutput == nil || explicitOutput == "-" {
            for url in (sources.isSameFile ? Array(urls.prefix(1)) : urls) where explicitOutput == nil && Self.defaultFileName(for: url) == nil {
                throw UsageError("Cannot name a file after '\(URLRedaction.redacted(url))' (no file name in its path); use '\(output.synopsis)'")
            }
        }
    }

    static let urls = Positional(name: "url", help: "http or https URLs to download.", isRepeating: true)
    static let positionals = [urls]
    static let discussion: String? = """
        Each file is written to NAME.part and moved to NAME only once it is complete (and matches \
        --sha256). A destination that already exists is never overwritten: delete it first; if it \
        matches --sha256, or an earlier run completed it and the server still gives the same \
        length and ETag (or Last-Modified), it counts as complete and nothing is downloaded. \
        Interrupting (Ctrl-C, SIGTERM) pauses and keeps the resume data; running the same command \
        again (same destination) continues from the stored offset, if the server's ETag or \
        Last-Modified still match; a second Ctrl-C quits without waiting for the checkpoint. \
        A link that expires (HTTP 401, 403, 410 after some bytes) keeps them: rerun with the new \
        URL and the same -o to continue. \
        \(MirrorOptions.discussion) \(metalinkDiscussion) \
        A progress bar per download is drawn on stderr when it is a \
        terminal; otherwise events are printed one per line.
        """ + "\n\n" + """
        Proxies: libcurl's environment variables are honoured as by curl (http_proxy, https_proxy, \
        all_proxy, no_proxy); --proxy overrides them, --no-proxy ignores them. A proxy that cannot be \
        reached is named in the error, and the started/resumed events name the proxy used ("proxy", \
        its password masked; null for a direct connection). Through a site cache (nginx proxy_cache \
        with slice, squid), a range whose ETag, Last-Modified or length differs from the download's is \
        never written: see docs/downloads.md.
        """ + "\n\n" + """
        Exit status: 0 every file complete and verified; 1 a download failed for good (HTTP error, \
        checksum mismatch, untrusted certificate, bad reply; nothing is kept but an expired link's \
        bytes); 64 usage error; \
        73 a destination already exists (also one that appears meanwhile: it is never replaced), \
        cannot be created or written, or its NAME.part is not a regular file of yours; 74 the disk is full or \
        failed; 75 gave up for now (--max-outage, or the server kept failing): run the same command \
        again; 77 --netns without privilege; 66 no such network namespace; 78 bad classify.conf or an \
        unsafe state directory (the message says the fix); \
        130 interrupted by SIGINT, 143 by SIGTERM. Only failures that say "resume data kept" keep it.
        """ + "\n\n" + MonitorOptions.discussion

    /// One URL and where it goes.
    struct Job: Sendable, Equatable {
        var url: URL
        var destination: URL
        /// `-o -`: the destination is a file in the state directory, written to stdout when done.
        var isStandardOutput = false
        /// Other sources of the same file (`--mirror`, `--same-file`), tried in this order when
        /// `url` fails (`MirrorFailover`).
        var mirrors: [URL] = []
    }

    /// Downloads transferring at once (the agent's default); further URLs wait for a slot.
    static let maximumConcurrentDownloads = 4

    var urls: [URL] = []
    /// `--mirror` and `--same-file`: the positional URLs (or the one with its mirrors) are one file.
    var sources = MirrorOptions()
    var explicitOutput: String?
    var directory: String?
    var expectedSHA256: String?
    var allowsExpensive = true
    var allowsRoaming = true
    /// `--wait-for-space`: the free-space rule instead of exit 74 on a full disk.
    var waitsForSpace = false
    /// `--connections`: nil keeps the agent's default.
    var maximumConnections: Int?
    /// `--interface`, in the order given.
    var interfaces: [String] = []
    var usesExpensivePathsOnlyAsFallback = false
    var stateDirectoryOverride: String?
    var maximumOutageWait: Duration?
    /// `--json`, `--quiet`.
    var events = EventOutputOptions()
    var isJSON: Bool { events.isJSON }
    var isQuiet: Bool { events.isQuiet }
    var headers: [String] = []
    /// `--limit-rate`, `--cacert`, `--proxy`, `--no-proxy`: set on each engine the command starts.
    var transport = TransportOptions()
    var verifiesCertificates = true
    var monitor = MonitorOptions()
    /// `--metalink`: the Metalink file given instead of URLs (read by `resolvingMetalink`).
    var metalinkFile: String?
    /// The Metalink's SHA-256 pieces, checked when it gives no whole-file SHA-256.
    var metalinkPieces: MetalinkPieceCheck?
    /// The Metalink's piece hashes, checked by the engine as pieces land (issue 34).
    var pieceHashes: PieceHashes?
    /// The length the file must have (a Metalink's `<size>`); nil trusts the server.
    var expectedLength: Int64?

    /// `-o -`.
    var writesToStandardOutput: Bool { explicitOutput == "-" }

    init() {}

    /// Only absolute http/https URLs with a host; anything else is a usage error.
    static func parseURL(_ text: String) throws -> URL {
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(),
              let host = url.host, !host.isEmpty else {
            throw UsageError("The value '\(URLRedaction.redacted(text))' is invalid for '<url>': expected an http or https URL")
        }
        guard scheme == "http" || scheme == "https" else {
            throw UsageError("The value '\(URLRedaction.redacted(text))' is invalid for '<url>': only http and https URLs are supported, not '\(scheme)'")
        }
        return url
    }

    /// The URL's last path component, as curl -O and wget name files; nil when there is none.
    /// Control characters stay percent-encoded (`%0D%0A`), as wget's default
    /// `--restrict-file-names=unix` keeps them: a file name with CR, LF or ESC in it would
    /// garble every listing and terminal that shows it.
    static func defaultFileName(for url: URL) -> String? {
        // Foundation has already percent-decoded it once (`a%2541` is `a%41`, not `aA`).
        let decoded = url.lastPathComponent
        var name = ""
        for scalar in decoded.unicodeScalars {
            if scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) {
                name += String(scalar).utf8.map { "%" + String($0, radix: 16, uppercase: true).leftPadded(to: 2) }.joined()
            } else {
                name.unicodeScalars.append(scalar)
            }
        }
        guard !name.isEmpty, name != "/", name != ".", name != "..", !name.contains("/") else { return nil }
        return name
    }

    /// Where each URL goes, relative paths resolved against `workingDirectory`; `-o -` downloads
    /// into `stateRoot/stdout/` first.
    func jobs(workingDirectory: String, stateRoot: URL? = nil) throws -> [Job] {
        let base = URL(fileURLWithPath: workingDirectory, isDirectory: true)
        // One file from several sources is one job, named after the first URL.
        let urls = sources.isSameFile ? Array(self.urls.prefix(1)) : self.urls
        let jobs = urls.map { url -> Job in
            let destination: URL
            if writesToStandardOutput {
                let root = stateRoot ?? base
                let name = sources.fileName ?? Self.defaultFileName(for: url) ?? "download"
                let key = DownloadStateDirectory.stableName(url.absoluteString + "\n/dev/stdout")
                return Job(url: url, destination: root.appendingPathComponent("stdout/\(key)/\(name)").standardizedFileURL,
                           isStandardOutput: true, mirrors: sources.mirrors)
            } else if let explicitOutput {
                destination = URL(fileURLWithPath: explicitOutput, relativeTo: base)
            } else {
                let folder = directory.map { URL(fileURLWithPath: $0, isDirectory: true, relativeTo: base) } ?? base
                destination = folder.appendingPathComponent(sources.fileName ?? Self.defaultFileName(for: url)!)
            }
            return Job(url: url, destination: destination.standardizedFileURL, mirrors: sources.mirrors)
        }
        var seen: Set<String> = []
        for job in jobs where !seen.insert(job.destination.path).inserted {
            throw UsageError("Two URLs would be saved as '\(job.destination.path)'; download them separately with '\(Self.option("output").synopsis)'")
        }
        return jobs
    }

    /// A download that did not finish, reported after the others.
    struct JobFailure: Sendable, Equatable {
        var job: Job
        var message: String
        var exitCode: ExitCode
    }

    func run(in context: CommandContext) async throws -> ExitCode {
        // Into --netns before anything reaches the network: a Metalink given by URL is fetched
        // there, as the file is (issue 34).
        try DownloadPlan.enterNamespace(of: self, in: context)
        let command = try await resolvingMetalink(in: context)
        let plan = try DownloadPlan.prepare(command, in: context)
        return try await DownloadRun(command: command, plan: plan, context: context).execute()
    }

    /// Copies a finished file to stdout in 1 MiB reads.
    static func copyToStandardOutput(_ file: URL, context: CommandContext) throws {
        let descriptor = try FileDescriptor.openForReading(file.path, followingLinks: false)
        defer { descriptor.close() }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        while true {
            let count = try descriptor.read(into: buffer)
            if count == 0 { return }
            try context.writeStandardOutput(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
        }
    }
}

extension ExitCode {
    /// EX_CANTCREAT: the destination exists or its directory cannot be made.
    static let cannotCreate = ExitCode(rawValue: 73)
    /// EX_IOERR: the disk filled up or failed, or stdout could not be written.
    static let ioError = ExitCode(rawValue: 74)
    /// EX_TEMPFAIL: gave up waiting for the network or the server; running again later can succeed.
    static let temporaryFailure = ExitCode(rawValue: 75)
}

private extension String {
    /// Zeros in front up to `width` characters (`0D`).
    func leftPadded(to width: Int) -> String { count < width ? String(repeating: "0", count: width - count) + self : self }
}
