import Foundation
import Testing
@testable import ReachabilityAgent
@testable import ReachabilityCLI

/// Diagnostics that echo what a user (or a URL, or the kernel) handed us never carry raw
/// control characters to the terminal.
@Suite("terminal-safe diagnostics")
struct TerminalTextTests {
    @Test func escapesControlsAndBidiOverrides() {
        #expect(TerminalText.escaped("plain ümlaut ☃") == "plain ümlaut ☃")
        #expect(TerminalText.escaped("a\r\nb\tc") == #"a\r\nb\tc"#)
        #expect(TerminalText.escaped("\u{1B}[2J\u{7}\u{0}\u{7F}") == #"\x1B[2J\x07\x00\x7F"#)
        #expect(TerminalText.escaped("\u{9B}31m") == #"\u{9B}31m"#)
        #expect(TerminalText.escaped("evil\u{202E}txt.exe") == #"evil\u{202E}txt.exe"#)
    }

    /// Session names (issue 29): two names that differ never print alike. Zero-width and other
    /// invisible characters are written out, and so is every non-ASCII scalar of a name that
    /// mixes scripts; a name in one script is kept.
    @Test func sessionNamesThatCouldPassForOthersAreWrittenOut() {
        #expect(TerminalText.escapedName("com.example.sync") == "com.example.sync")
        #expect(TerminalText.escapedName("com.exam\u{200B}ple") == #"com.exam\u{200B}ple"#)
        #expect(TerminalText.escapedName("com.example\u{2060}") == #"com.example\u{2060}"#)
        #expect(TerminalText.escapedName("a\u{00A0}b") == #"a\u{A0}b"#)
        #expect(TerminalText.escapedName("e\u{301}x") == #"e\u{301}x"#)
        // Latin with a Cyrillic "а" (U+0430): looks like "paypal".
        #expect(TerminalText.escapedName("p\u{430}ypal") == #"p\u{430}ypal"#)
        #expect(TerminalText.escapedName("Ωmega") == #"\u{3A9}mega"#)
        #expect(TerminalText.escapedName("синхронизация") == "синхронизация")
        #expect(TerminalText.escapedName("同期") == "同期")
        #expect(TerminalText.escapedName("同期.app") == #"\u{540C}\u{671F}.app"#, "CJK beside Latin letters")
        #expect(TerminalText.escapedName("évian") == "évian")
        #expect(TerminalText.escapedName("evil\u{202E}txt") == #"evil\u{202E}txt"#)
        #expect(TerminalText.escapedName("a\nb") == #"a\nb"#)
    }

    /// Every way an argument is echoed in a usage error, and runtime errors: one line each,
    /// no CR, LF or ESC from the argument.
    @Test(arguments: [
        ["download", "-H", "X: a\r\nError: forged\u{1B}[2J", "http://a/x"],
        ["download", "--limit-rate", "1\r\nforged", "http://a/x"],
        ["download", "http://\u{1B}]0;title\u{7}/x"],
        ["stat\r\nus"],
        ["queue", "l\u{1B}st"],
        ["status", "--js\ron"],
        ["status", "--netns", "a\u{1B}[31m"],
        ["status", "unexpected\r\nargument"],
        ["wait", "--timeout", "\u{1B}[1A"],
        ["help", "x\ny"],
        ["agent", "metrics", "--format", "\r"],
    ])
    func usageErrorsEscapeEchoedInput(arguments: [String]) async {
        let harness = Harness(canEnterNetworkNamespace: false)
        #expect(await harness.run(arguments) != 0)
        let errors = harness.standardError.text
        #expect(errors.hasPrefix("Error: "), "\(errors)")
        #expect(!errors.contains("\r") && !errors.contains("\u{1B}") && !errors.contains("\u{7}"), "\(errors.debugDescription)")
        let firstLine = errors.split(separator: "\n").first ?? ""
        #expect(!firstLine.isEmpty && !errors.contains("\nError: forged"), "\(errors.debugDescription)")
    }

    @Test func fileNamesFromURLsKeepControlsEncoded() throws {
        #expect(DownloadCommand.defaultFileName(for: URL(string: "http://a/b%0D%0AX")!) == "b%0D%0AX")
        #expect(DownloadCommand.defaultFileName(for: URL(string: "http://a/%1B%5B2J.iso")!) == "%1B[2J.iso")
        #expect(DownloadCommand.defaultFileName(for: URL(string: "http://a/file%20name.bin")!) == "file name.bin")
        #expect(DownloadCommand.defaultFileName(for: URL(string: "http://a/a%2541.bin")!) == "a%41.bin", "decoded once, as wget does")
        #expect(DownloadCommand.defaultFileName(for: URL(string: "http://a/caf%C3%A9")!) == "café")
        #expect(DownloadCommand.defaultFileName(for: URL(string: "http://a/x%C2%9B")!) == "x%C2%9B")
    }

    @Test func queueListLinesAreEscaped() {
        let line = DownloadLine.text(AgentDownload(id: "1234567890", url: "http://a/x", destination: "/d/\u{1B}[2Jx",
                                                      state: .failed, bytesReceived: 0, totalBytes: nil, bytesPerSecond: 0,
                                                      error: "server said \r\nforged"))
        #expect(!line.contains("\u{1B}") && !line.contains("\r") && !line.contains("\n"))
    }
}
