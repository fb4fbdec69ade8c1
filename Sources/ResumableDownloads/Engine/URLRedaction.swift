import FoundationEssentials

/// URLs as shown to people: in errors, events, logs, `queue list` and `--json` output. A
/// password in the URL (`http://user:secret@host/`) becomes `***`, and so does a user name that
/// comes alone (`https://TOKEN@host/`: an access token, as code hosts hand them out); with a
/// password, the user name stays, as `--proxy` errors show it. The rest of the text is left as
/// it was written. What is sent on the wire is the real URL: only the shown text is changed.
public enum URLRedaction {
    /// `text` with its userinfo masked; text without `scheme://...@` is returned as is.
    public static func redacted(_ text: String) -> String {
        guard let schemeEnd = text.firstRange(of: "://") else { return text }
        let authorityStart = schemeEnd.upperBound
        let rest = text[authorityStart...]
        let authorityEnd = rest.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? text.endIndex
        let authority = text[authorityStart..<authorityEnd]
        guard let at = authority.lastIndex(of: "@") else { return text }
        let userinfo = authority[..<at]
        let masked = userinfo.firstIndex(of: ":").map { userinfo[..<$0] + ":***" } ?? "***"
        return String(text[..<authorityStart]) + masked + String(text[at...])
    }

    /// The URL's text with its userinfo masked.
    public static func redacted(_ url: URL) -> String { redacted(url.absoluteString) }
}
