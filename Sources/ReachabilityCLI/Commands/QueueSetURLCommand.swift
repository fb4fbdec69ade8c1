import FoundationEssentials
import ReachabilityAgent

/// `reachability queue set-url ID URL`: an expired link replaced, the bytes kept (issue 34;
/// BITS' `SetRemoteName`).
struct QueueSetURLCommand: Command, OptionTable {
    static let name = "queue set-url"
    static let abstract = "Fetch a queued download from a new URL, keeping the bytes it has (an expired link replaced)."
    static let table: [OptionRow<Self>] = ControlOptions.rows(at: \.control) + [
        .then { arguments, command in
            command.id = arguments.positional(positionals[0])[0]
            command.url = try DownloadCommand.parseURL(arguments.positional(positionals[1])[0])
        },
    ]
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

    var id = ""
    /// Replaced by the positional URL before the command runs.
    var url = URL(fileURLWithPath: "/")
    var control = ControlOptions()

    func run(in context: CommandContext) async throws -> ExitCode {
        let response = try await control.send(.setURL(id, url: url), in: context)
        if let download = response.download { context.output.line(DownloadLine.text(download)) }
        return .success
    }
}
