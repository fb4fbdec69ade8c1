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
