import FoundationEssentials
import LinuxSystem
import ReachabilityAgent
import ReachabilityBase
import ResumableDownloads

/// `reachability queue add --upload FILE URL [--protocol P] [-X METHOD] [--restart-plain]`: an
/// upload job of the agent. The command opens the file itself and passes the open file to the
/// agent with the request (SCM_RIGHTS), so the agent uploads only what this caller can read.
struct QueueAddUpload: Sendable {
    static let upload = Option.value(
        "upload", valueName: "file",
        help: "Upload this regular file to URL as a job of the agent, instead of downloading URL: it survives this command, follows the path, and continues from the server's offset after an agent restart. The file is opened here and handed to the agent, which sends only what you can read.")
    static let options = [upload] + ["protocol", "method", "restart-plain"].map(UploadCommand.option)
    /// Download options that mean nothing for an upload.
    static let downloadOnly = ["output", "sha256", "replace", "connections", "no-constrained", "priority"].map(QueueAddCommand.option)

    var path: String
    var request: UploadJobRequest

    /// The upload part of `queue add`'s arguments; nil without `--upload` (then the upload-only
    /// options are a usage error).
    init?(arguments: ParsedArguments) throws {
        guard let path = arguments.value(Self.upload) else {
            for option in Self.options.dropFirst() where arguments.isSet(option) || arguments.value(option) != nil {
                throw UsageError("--\(option.name) needs --upload FILE")
            }
            return nil
        }
        guard !path.isEmpty else { throw UsageError.invalidValue(path, for: Self.upload, "expected a file path") }
        for option in Self.downloadOnly where arguments.isSet(option) || arguments.value(option) != nil {
            throw UsageError("--\(option.name) is for downloads; an upload job takes --protocol, --method and --restart-plain")
        }
        self.path = path
        request = UploadJobRequest(file: path, protocol: try UploadCommand.protocolChoice(arguments, Self.options[1]) ?? .auto,
                                   method: try UploadCommand.method(arguments, Self.options[2]),
                                   restartPlain: arguments.isSet(Self.options[3]))
    }

    /// Opens the file, checks it is a regular file, and hands it to the agent with the request.
    func run(to url: URL, control: ControlOptions, in context: CommandContext) async throws -> ExitCode {
        // The agent has its own working directory (and maybe its own mount namespace): the path is
        // only a name for reports and for reopening after an agent restart; the file goes open.
        let file: UploadSourceFile
        switch UploadSourceFile.open(path, currentDirectory: context.currentDirectory) {
        case .success(let opened): file = opened
        case .failure(let problem): throw CommandFailure(message: problem.message, exitCode: .noInput)
        }
        defer { file.descriptor.close() }
        var request = request
        request.file = file.path
        let response = try await control.send(.addUpload(url: url, request), passing: file.descriptor, in: context)
        if let job = response.download { context.output.line(DownloadLine.text(job)) }
        return .success
    }

    /// An upload job as a text line: `1f2e3d4c  running  2.0 MiB / 16.0 MiB sent  /path -> https://...  [upload, tus]`.
    static func line(_ job: AgentDownload) -> String {
        let sent = DownloadLine.mebibytes(job.bytesSent ?? 0)
        let size = job.totalBytes.map { "\(sent) / \(DownloadLine.mebibytes($0)) sent" } ?? "\(sent) sent"
        var line = "\(job.id.prefix(8))  \(TextFormat.leftAligned(String(job.state.rawValue.prefix(22)), width: 22)) \(size)  \(job.destination) -> \(job.url)"
        line += "  [upload\(job.uploadProtocol.map { ", \($0)" } ?? "")]"
        if let error = job.error { line += "  (\(error))" }
        return TerminalText.escaped(line)
    }
}
