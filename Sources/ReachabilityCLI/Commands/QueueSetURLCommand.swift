import FoundationEssentials
import ReachabilityAgent

/// `reachability queue set-url ID URL`: an expired link replaced, the bytes kept (issue 34;
/// BITS' `SetRemoteName`).
struct QueueSetURLCommand: Command {
    static let name = "queue set-url"
    static let abstract = "Fetch a queued download from a new URL, keeping the bytes it has (an expired link replaced)."
    static let options = [ControlOptions.stateDirectory]
    static let positionals = [Positional(name: "id", help: "A download ID or a unique prefix of one (see 'queue list')."),
                              Positional(name: "url", help: "The new http or https URL of the same file.")]
    static let discussion: String? = """
        For a presigned link or CDN token that expired (the job failed with HTTP 401, 403 or 410) \
        or is about to. The job continues at its stored offset when the new URL serves the same file: \
        the same length, and the ETag or Last-Modified it recorded (sent in If-Range) still matching; \
        a --sha256 given to 'queue add' still checks the whole file at the end. Otherwise the server \
        sends the whole file and the job starts over from zero; its 'restarted' event says why. A \
        running job moves to the new URL at once (checkpointed first), a failed one is queued again, \
        a paused one stays paused. Prints the job's line.
        """ + "\n\n" + ControlOptions.discussion

    var id: String
    var url: URL
    var control: ControlOptions

    init(arguments: ParsedArguments) throws {
        id = arguments.positional(Self.positionals[0])[0]
        url = try DownloadCommand.parseURL(arguments.positional(Self.positionals[1])[0])
        control = ControlOptions(arguments: arguments)
    }

    func run(in context: CommandContext) async throws -> ExitCode {
        let response = try await control.send(.setURL(id, url: url), in: context)
        if let download = response.download { context.output.line(DownloadLine.text(download)) }
        return .success
    }
}
