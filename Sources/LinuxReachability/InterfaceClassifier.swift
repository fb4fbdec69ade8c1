/// A user rule `PATTERN=TYPE` that wins over every kernel fact.
public struct ClassificationOverride: Sendable, Hashable {
    /// Shell-style glob over interface names (`*`, `?`, `[...]`).
    public var pattern: String
    /// The type to report for matching interfaces.
    public var type: InterfaceType
    /// Where the rule came from, e.g. `--classify` or a config file path and line.
    public var source: String

    /// Creates an override.
    public init(pattern: String, type: InterfaceType, source: String) {
        self.pattern = pattern
        self.type = type
        self.source = source
    }
}
