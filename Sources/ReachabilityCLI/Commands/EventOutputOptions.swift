/// `--json` and `--quiet` of the commands that report a transfer's events (`download`, `upload`):
/// declared and read once, so the two commands mean the same by them.
struct EventOutputOptions: OptionTable, Equatable {
    static let table: [OptionRow<Self>] = [
        .flag("json", help: "Print one JSON object per event on stdout (NDJSON, docs/events.md) instead of text lines on stderr.", sets: \.isJSON),
        .flag("quiet", short: "q", help: "Print no events and no progress bars; errors are still printed.", sets: \.isQuiet),
    ]

    /// `--json`.
    var isJSON = false
    /// `--quiet`.
    var isQuiet = false
}

extension Option {
    /// `--state-dir` of the commands that keep or reach the state directory, holding `contents`;
    /// one text for the default every one of them resolves (`StateDirectoryLocation`).
    static func stateDirectory(holding contents: String) -> Option {
        .value("state-dir", valueName: "dir",
               help: "The state directory (\(contents)). Default: $REACHABILITY_STATE_DIR, else $XDG_STATE_HOME/reachability, else /var/lib/reachability as root, else ~/.local/state/reachability.")
    }
}
