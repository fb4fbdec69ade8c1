import FoundationEssentials
import Testing

/// The CLI must not link Foundation proper: one call into it (it was `replacingOccurrences`,
/// an NSString API) pulls CoreFoundation, ICU and CoreFoundation's load-time initialiser into
/// every command, 3-4 MiB more resident memory for `watch` and `download` (issue 10).
///
/// The release link drops what nothing references, so the rule is enforced at the source: the
/// CLI's files import FoundationEssentials only (with MemberImportVisibility they then cannot
/// reach Foundation proper's members through another file), and in the libraries only the two
/// files whose Foundation API is emitted into the caller (`@_alwaysEmitIntoClient`: URLError,
/// NotificationCenter) import it. `bench/cost_bench.py` checks the release binary itself.
@Suite("Foundation footprint")
struct FoundationFootprintTests {
    static let packageRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static let allowed: Set<String> = [
        "Sources/ResumableDownloads/Agent/DownloadError.swift",
        "Sources/LinuxReachability/Reachability.swift",
    ]

    /// Every Swift file under the targets the `reachability` executable links.
    static func sources() throws -> [String] {
        var files: [String] = []
        for target in ["reachability", "ReachabilityCLI", "ReachabilityAgent", "ResumableDownloads", "LinuxReachability", "LinuxSystem",
                       "ReachabilityBase"] {
            let directory = packageRoot.appendingPathComponent("Sources/\(target)")
            guard let walker = FileManager.default.enumerator(atPath: directory.path) else { continue }
            while let path = walker.nextObject() as? String {
                if path.hasSuffix(".swift") { files.append("Sources/\(target)/\(path)") }
            }
        }
        return files
    }

    @Test("no file the CLI links imports Foundation proper, except the two emitted into clients")
    func cliLinksNoFoundationProper() throws {
        let files = try Self.sources()
        #expect(files.count > 50, "found \(files.count) source files under \(Self.packageRoot.path)")
        var offenders: [String] = []
        for file in files where !Self.allowed.contains(file) {
            let text = try String(contentsOf: Self.packageRoot.appendingPathComponent(file), encoding: .utf8)
            for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
                let words = line.split(separator: " ")
                if let index = words.firstIndex(of: "import"), index + 1 < words.count,
                   ["Foundation", "FoundationNetworking", "FoundationInternationalization"].contains(String(words[index + 1])) {
                    offenders.append("\(file): \(line)")
                }
            }
        }
        #expect(offenders.isEmpty, "import FoundationEssentials instead: \(offenders)")
    }
}
