import FoundationEssentials
import LinuxSystem
import ReachabilityBase
import ReachabilityEvents
import Synchronization

/// `queue add --on-complete 'CMD ARG ...'` (issue 32 item 6): a program run when the job ends,
/// as an argv (no shell), split once from the text the user gave. Pure.
package enum OnCompleteCommand {
    /// Most arguments, and most bytes over all of them.
    package static let maximumArguments = 64
    package static let maximumLength = 4096

    /// Splits `text` as a POSIX shell splits words, without anything else a shell does: blanks
    /// separate words, `'...'` keeps everything literally, `"..."` keeps everything but `\"` and
    /// `\\`, and `\` outside quotes escapes the next character. No variables, globs, redirections
    /// or `;` (they are plain characters). The program is an absolute path or a bare name looked
    /// up on the agent's PATH (a relative path would depend on the agent's working directory).
    /// Throws the reason otherwise.
    package static func parse(_ text: String) throws(InvalidValue) -> [String] {
        func invalid(_ why: String) -> InvalidValue { InvalidValue(text: text, expectation: why) }
        guard text.utf8.count <= maximumLength else { throw invalid("a command of at most \(maximumLength) bytes") }
        guard !text.unicodeScalars.contains(where: { $0.properties.generalCategory == .control && $0 != "\t" }) else {
            throw invalid("a command without control characters")
        }
        var words: [String] = []
        var word = ""
        var inWord = false
        var quote: Character?
        var escaped = false
        for character in text {
            if escaped {
                word.append(character)
                escaped = false
                continue
            }
            switch (quote, character) {
            case ("'", "'"), ("\"", "\""):
                quote = nil
            case ("'", _):
                word.append(character)
            case ("\"", "\\"):
                escaped = true
            case ("\"", _):
                word.append(character)
            case (nil, "'"), (nil, "\""):
                quote = character
                inWord = true
            case (nil, "\\"):
                escaped = true
                inWord = true
            case (nil, " "), (nil, "\t"):
                if inWord { words.append(word) }
                word = ""
                inWord = false
            default:
                word.append(character)
                inWord = true
            }
        }
        guard quote == nil, !escaped else { throw invalid("a command whose quotes are closed") }
        if inWord { words.append(word) }
        guard let program = words.first, !program.isEmpty else { throw invalid("a command: a program and its arguments") }
        guard words.count <= maximumArguments else { throw invalid("a command of at most \(maximumArguments) arguments") }
        guard program.hasPrefix("/") || !program.contains("/") else {
            throw invalid("a program given as an absolute path or a name on the agent's PATH (the agent runs it from /)")
        }
        return words
    }

    /// Checks an argv that arrived already split (the control protocol's `onComplete`) by the
    /// same rules; nil when it is fine, else the reason.
    package static func problem(with argv: [String]) -> String? {
        guard let program = argv.first, !program.isEmpty else { return "'onComplete' needs a program" }
        guard argv.count <= maximumArguments, argv.reduce(0, { $0 + $1.utf8.count }) <= maximumLength else {
            return "'onComplete' may have at most \(maximumArguments) arguments of \(maximumLength) bytes together"
        }
        guard !argv.contains(where: { $0.unicodeScalars.contains { $0.properties.generalCategory == .control && $0 != "\t" } }) else {
            return "'onComplete' may not contain control characters"
        }
        guard program.hasPrefix("/") || !program.contains("/") else {
            return "'onComplete' needs an absolute program path or a name on the agent's PATH"
        }
        return nil
    }

    /// How many times a failing command is run again, and the waits before each (BITS retries its
    /// notification command line the same way).
    package static let retryDelays: [Duration] = [.seconds(1), .seconds(2), .seconds(4), .seconds(8), .seconds(16)]

    /// The environment a run gets besides the agent's.
    package static func environment(id: UUID, url: String, file: String, outcome: String, error: String?) -> [String: String] {
        var variables = ["REACHABILITY_JOB_ID": id.uuidString.lowercased(), "REACHABILITY_URL": url,
                         "REACHABILITY_FILE": file, "REACHABILITY_OUTCOME": outcome]
        if let error { variables["REACHABILITY_ERROR"] = error }
        return variables
    }
}

/// Runs the `--on-complete` commands of the agent's jobs: each when its job ends, as the agent's
/// own user (who is the job's owner: only that user may add one), from `/`, its output to the
/// agent's standard error; a non-zero exit (or a program that cannot start) is retried after
/// `OnCompleteCommand.retryDelays`, at most 5 times. Every run is an event
/// (`{"type":"download","event":"onComplete","id":…,"run":1,"status":"exited with status 1"}`).
/// Commands are kept in memory and in the job's resume record (`CompletionCommand`, with the
/// step its one run has reached): a job restored after a restart registers its command again
/// (`registerOnComplete(ofRestored:)`), or as already run when its record says so.
package final class OnCompleteRunner: Sendable {
    /// A job's command: still to run at its end, or run (or given up) already, and why.
    package enum Claim: Sendable, Equatable {
        /// Due: the program and its arguments.
        case due([String])
        /// Not to run again, with the reason an event gives.
        case ran(String)
    }

    private let commands = Mutex<[UUID: Claim]>([:])
    /// The waits between runs (tests make them short).
    let delays: [Duration]

    package init(delays: [Duration] = OnCompleteCommand.retryDelays) {
        self.delays = delays
    }

    /// Remembers `argv` for job `id`.
    package func register(_ argv: [String], for id: UUID) {
        commands.withLock { $0[id] = .due(argv) }
    }

    /// Remembers that job `id`'s command must not run again (its record says it started or ran).
    package func registerAsRun(_ id: UUID, reason: String) {
        commands.withLock { $0[id] = .ran(reason) }
    }

    /// The command registered for `id` and still due, if any.
    package func command(for id: UUID) -> [String]? {
        commands.withLock { if case .due(let argv) = $0[id] { argv } else { nil } }
    }

    /// Job `id` ended: its command if it is due (from now on it counts as run: once per job,
    /// also when a failed job is resumed and ends again), the reason when it ran already, nil
    /// when it has none.
    package func claim(_ id: UUID) -> Claim? {
        commands.withLock { commands in
            let claim = commands[id]
            if case .due = claim { commands[id] = .ran("it ran when the job ended before") }
            return claim
        }
    }

    /// Job `id` ended: runs its command (once per job), retrying failures; `emit` gets each event
    /// line, `environment` is the agent's (launch environment).
    package func jobEnded(_ id: UUID, url: String, file: String, outcome: String, error: String?,
                          environment: [String: String], now: @escaping @Sendable () -> Date,
                          emit: @escaping @Sendable (String) -> Void) {
        guard case .due(let argv) = claim(id) else { return }
        run(argv, for: id, url: url, file: file, outcome: outcome, error: error, environment: environment, now: now, emit: emit)
    }

    /// Runs `argv` for job `id` on a thread of its own, retrying failures; `finished` is called
    /// after the last run (success, or out of retries).
    package func run(_ argv: [String], for id: UUID, url: String, file: String, outcome: String, error: String?,
                     environment: [String: String], now: @escaping @Sendable () -> Date,
                     emit: @escaping @Sendable (String) -> Void, finished: @escaping @Sendable () -> Void = {}) {
        let variables = environment.merging(OnCompleteCommand.environment(id: id, url: url, file: file, outcome: outcome,
                                                                          error: error)) { $1 }
        let delays = delays
        SystemThread.detach(name: "on-complete") {
            defer { finished() }
            for run in 1...(delays.count + 1) {
                let failure = Self.run(argv, variables)
                emit(EventSchema.line(.download, "onComplete", at: now(), [
                    .init(key: "id", value: .string(id.uuidString.lowercased())), .init(key: "run", value: .integer(run)),
                    .init(key: "command", value: .string(argv[0])),
                    .init(key: "status", value: .string(failure ?? "exited with status 0")),
                    .init(key: "retry", value: .bool(failure != nil && run <= delays.count))]))
                guard failure != nil, run <= delays.count else { return }
                Self.sleep(delays[run - 1])
            }
        }
    }

    /// Runs `argv` to its end; nil for exit status 0, else why not.
    private static func run(_ argv: [String], _ environment: [String: String]) -> String? {
        let standardError = FileDescriptor(rawValue: 2)
        do {
            let pid = try CurrentProcess.spawn(argv[0], arguments: argv, environment: environment, searchingPath: true,
                                               newSession: true, directory: "/", standardOutput: standardError,
                                               standardError: standardError)
            guard let status = CurrentProcess.waitForExit(of: pid) else { return nil }
            return status.isSuccess ? nil : "\(status)"
        } catch {
            return "cannot start \(argv[0]): \(error)"
        }
    }

    /// A blocking wait on the runner's own thread (it has nothing else to do meanwhile).
    private static func sleep(_ duration: Duration) {
        CurrentProcess.sleep(milliseconds: Int(duration.milliseconds))
    }
}
