import FoundationEssentials
import LinuxSystem
import ReachabilityBase
import ResumableDownloads

/// `download --metalink FILE`: the file's sources, size and hashes come from a Metalink 4
/// document (RFC 5854) instead of the command line.
extension DownloadCommand {
    static let metalink = Option.flag(
        "metalink",
        help: "The argument is a Metalink 4 file (RFC 5854, .meta4), or the http(s) URL of one, describing one file: its http(s) URLs become the mirrors in priority order, its SHA-256 the --sha256 check (pieces hashed with SHA-256 are checked too), its name the file name unless -o is given.")

    /// `download --help`'s paragraph on Metalink.
    static let metalinkDiscussion = """
        --metalink FILE reads a Metalink 4 document of one file (at most 1 MiB, no DTD or \
        entities but XML's five, at most \(Metalink.maximumSources) URLs); one that cannot be used \
        exits 65 with what is wrong, one that cannot be read exits 66. A name with a directory \
        part is not used: give -o.
        """

    /// Largest Metalink document read.
    static let maximumMetalinkBytes = 1 << 20

    /// The positional argument of `--metalink`: one local file (a URL is refused for now).
    static func metalinkPath(_ positionals: [String], arguments: ParsedArguments) throws -> String? {
        guard arguments.isSet(metalink) else { return nil }
        guard positionals.count == 1, let path = positionals.first, !path.isEmpty else {
            throw UsageError("'\(metalink.synopsis)' takes one Metalink file, but \(positionals.count) arguments were given")
        }
        if path.lowercased().hasPrefix("http://") || path.lowercased().hasPrefix("https://") {
            do {
                _ = try parseURL(path)
            } catch {
                throw UsageError.invalidValue(URLRedaction.redacted(path), for: metalink, "expected a Metalink file or an http or https URL")
            }
        }
        if try arguments.isSet(MirrorOptions.sameFile) || !arguments.values(MirrorOptions.mirror).isEmpty {
            throw UsageError("'\(metalink.synopsis)' takes its sources from the Metalink; '\(MirrorOptions.mirror.synopsis)' and '\(MirrorOptions.sameFile.synopsis)' cannot be added")
        }
        return path
    }

    /// This command with the Metalink's sources, hash and name in place of the positional URLs.
    func resolvingMetalink(in context: CommandContext) async throws -> DownloadCommand {
        guard let metalinkFile else { return self }
        let bytes = if let url = Self.metalinkURL(metalinkFile) {
            try await fetchMetalink(url, in: context)
        } else {
            try Self.readMetalink(metalinkFile, in: context)
        }
        let document: Metalink
        do {
            document = try Metalink(parsing: bytes)
        } catch {
            throw CommandFailure(message: "\(metalinkFile): \(error.description)", exitCode: .dataError)
        }
        Self.reportNotes(of: document, from: metalinkFile, in: context)
        return try adopting(document, from: metalinkFile)
    }

    /// The Metalink's values in place of the command line's (pure; tested without files).
    func adopting(_ document: Metalink, from file: String) throws(CommandFailure) -> DownloadCommand {
        var command = self
        if let given = expectedSHA256, let listed = document.sha256, given != listed {
            throw CommandFailure(message: "\(file): its SHA-256 differs from --sha256; give one of them", exitCode: .dataError)
        }
        command.expectedSHA256 = expectedSHA256 ?? document.sha256
        command.expectedLength = document.size
        // With a whole-file SHA-256 the engine's check (before the file is moved in place)
        // already covers every piece.
        if command.expectedSHA256 == nil, let pieces = document.pieces, let size = document.size {
            command.metalinkPieces = MetalinkPieceCheck(pieces: pieces, size: size)
        }
        if let pieces = document.pieces, let size = document.size {
            command.pieceHashes = PieceHashes(length: pieces.length, sha256: pieces.sha256, fileLength: size)
        }
        if explicitOutput == nil {
            guard let name = Metalink.plainFileName(document.name) else {
                throw CommandFailure(message: "\(file): its file name '\(document.name.prefix(200))' is not a plain file name (a directory part, '..', or control characters); give -o to choose where it goes",
                                     exitCode: .dataError)
            }
            command.sources.fileName = name
        }
        command.urls = [document.sources[0].url]
        command.sources.isSameFile = true
        command.sources.mirrors = document.sources.dropFirst().map(\.url)
        return command
    }

    /// What of the Metalink is not used (skipped `<url>`s, ignored piece hashes), on stderr.
    static func reportNotes(of document: Metalink, from file: String, in context: CommandContext) {
        let shown = metalinkURL(file).map { URLRedaction.redacted($0) } ?? file
        for note in document.notes {
            context.errorOutput.line("Note: \(TerminalText.escaped(shown)): \(note)")
        }
    }

    /// A local Metalink document read and parsed (66 when it cannot be read, 65 when unusable).
    static func metalinkDocument(_ path: String, in context: CommandContext) throws -> Metalink {
        let bytes = try readMetalink(path, in: context)
        do {
            return try Metalink(parsing: bytes)
        } catch {
            throw CommandFailure(message: "\(path): \(error.description)", exitCode: .dataError)
        }
    }

    /// The URL when `--metalink` names one (checked by `metalinkPath`).
    static func metalinkURL(_ argument: String) -> URL? {
        let lowered = argument.lowercased()
        guard lowered.hasPrefix("http://") || lowered.hasPrefix("https://") else { return nil }
        return try? parseURL(argument)
    }

    /// How long fetching a Metalink may wait for a path and the server's answer.
    static let metalinkFetchLimit = Duration.seconds(60)

    /// Fetches a Metalink document (`--metalink URL`): one GET through an agent with this
    /// command's headers and transport options (proxy, certificates, rate limit), at most `maximumMetalinkBytes` kept (a larger
    /// one is refused with 65, as a file); an error or a status other than 200 exits 1.
    func fetchMetalink(_ url: URL, in context: CommandContext) async throws -> [UInt8] {
        let source = try monitor.startPathSource(in: context)
        defer { source.cancel() }
        let stateRoot = try DownloadStateDirectory.resolve(override: stateDirectoryOverride, environment: context.environment)
        // The agent creates and checks its own state directory (0700) under the checked root.
        try DownloadStateDirectory.create(stateRoot)
        let directory = stateRoot.appendingPathComponent("metalink", isDirectory: true)
        var configuration = DownloadAgent.Configuration(stateDirectory: directory, maximumOutageWait: maximumOutageWait)
        configuration.additionalHeaders = headers
        transport.apply(to: &configuration, workingDirectory: context.currentDirectory)
        configuration.verifiesCertificates = verifiesCertificates
        let agent: DownloadAgent
        do {
            agent = try DownloadAgent(configuration: configuration, paths: source.paths, hostPaths: { source.paths(to: $0) })
        } catch {
            throw CommandFailure(message: "cannot start the download engine: \(error)", exitCode: .failure)
        }
        let shown = URLRedaction.redacted(url)
        let request = ExchangeRequest(url: url, idleTimeout: Self.metalinkFetchLimit, responseBodyLimit: Self.maximumMetalinkBytes)
        let result: Result<ExchangeResponse, DownloadError>
        do throws(DownloadError) {
            result = .success(try await agent.exchange(request, waitsForConnectivity: true))
        } catch {
            result = .failure(error)
        }
        await agent.shutdown()
        switch result {
        case .success(let response) where response.head.statusCode == 200:
            return [UInt8](response.body)
        case .success(let response):
            throw CommandFailure(message: "cannot fetch the Metalink \(shown): the server answered HTTP \(response.head.statusCode)",
                                 exitCode: .failure)
        case .failure(let error) where error.description.contains("larger than"):
            throw CommandFailure(message: "\(shown): larger than \(Self.maximumMetalinkBytes) bytes; not a Metalink this command reads",
                                 exitCode: .dataError)
        case .failure(let error):
            throw CommandFailure(message: "cannot fetch the Metalink \(shown): \(error.description)", exitCode: .failure)
        }
    }

    /// The document's bytes, at most `maximumMetalinkBytes` (66 when it cannot be read, 65 when larger).
    private static func readMetalink(_ path: String, in context: CommandContext) throws -> [UInt8] {
        let absolute = path.hasPrefix("/") ? path : context.currentDirectory + "/" + path
        var bytes: [UInt8] = []
        do {
            // Non-blocking: a FIFO with no writer, or a device, must not hang the command.
            let descriptor = try FileDescriptor.openForReading(absolute, nonBlocking: true)
            defer { descriptor.close() }
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 << 10, alignment: 16)
            defer { buffer.deallocate() }
            while bytes.count <= maximumMetalinkBytes {
                let count = try descriptor.read(into: buffer)
                if count == 0 { break }
                bytes += buffer[0..<count]
            }
        } catch {
            throw CommandFailure(message: "cannot read the Metalink \(path): \(TextFormat.reason(error))", exitCode: .noInput)
        }
        guard bytes.count <= maximumMetalinkBytes else {
            throw CommandFailure(message: "\(path): larger than \(maximumMetalinkBytes) bytes; not a Metalink this command reads", exitCode: .dataError)
        }
        return bytes
    }
}

extension ExitCode {
    /// EX_DATAERR: an input file (a Metalink) is malformed or hostile.
    static let dataError = ExitCode(rawValue: 65)
}
