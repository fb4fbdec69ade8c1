/// `--json` and `--quiet` of the commands that report a transfer's events (`download`, `upload`):
/// declared and read once, so the two commands mean the same by them.
struct EventOutputOptions: Sendable, Equatable {
    static let json = Option.flag(
        "json", help: "Print one JSON object per event on stdout (NDJSON, docs/events.md) instead of text lines on stderr.")
    static let quiet = Option.flag(
        "quiet", short: "q", help: "Print no events and no progress bars; errors are still printed.")
    /// The two, for an option table.
    static let all = [json, quiet]

    /// `--json`.
    var isJSON: Bool
    /// `--quiet`.
    var isQuiet: Bool

    init(arguments: ParsedArguments) {
        isJSON = arguments.isSet(Self.json)
        isQuiet = arguments.isSet(Self.quiet)
    }
}

extension Option {
    /// `--state-dir` of the commands that keep or reach the state directory, holding `contents`;
    /// one text for the default every one of them resolves (`StateDirectoryLocation`).
    static func stateDirectory(holding contents: String) -> Option {
        .value("state-dir", valueName: "dir",
               help: "The state directory (\(contents)). Default: $REACHABILITY_STATE_DIR, else $XDG_STATE_HOME/reachability, else /var/lib/reachability as root, else ~/.local/state/reachability.")
    }
}
