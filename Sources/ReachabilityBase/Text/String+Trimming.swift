extension StringProtocol {
    /// The text without leading and trailing spaces, tabs, CR and LF: HTTP's optional whitespace
    /// and a config line's padding. (FoundationEssentials has no `trimmingCharacters` for
    /// substrings; one ASCII definition serves both.)
    package func trimmingWhitespace() -> String {
        // "\r\n" is one Character (grapheme cluster), so it is listed on its own.
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\r" || $0 == "\n" || $0 == "\r\n" }
        guard let start = firstIndex(where: { !isSpace($0) }), let end = lastIndex(where: { !isSpace($0) })
        else { return "" }
        return String(self[start...end])
    }
}
