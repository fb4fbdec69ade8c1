import Dispatch
import Foundation
import Testing
import TestSupport

/// Every ```swift block of README.md and docs/libraries.md compiles as shown, in a package of its own that depends on
/// this one the way the README says.
///
/// The manifest block becomes the scratch package's `Package.swift` word for word, plus one
/// appended line that adds an executable target per program block (each its own `main.swift`,
/// as a reader would paste it). The dependency is reached through a link named `reachability`
/// beside the scratch package, so `.package(path: "../reachability")` and
/// `package: "reachability"` are tested as written, whatever this clone's directory is called.
/// The scratch package lives in `.build/readme-snippets`, so a second run only rebuilds what
/// changed (4 s; the first run builds the three library products: 51 s on 2 busy cores).
@Suite("README snippets")
struct ReadmeSnippetTests {
    static let packageRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The bodies of the fenced blocks marked `swift`, in order.
    static func swiftBlocks(in markdown: String) -> [String] {
        var blocks: [String] = []
        var current: [Substring]?
        for line in markdown.split(separator: "\n", omittingEmptySubsequences: false) {
            if current == nil {
                if line.trimmingCharacters(in: .whitespaces) == "```swift" { current = [] }
            } else if line.trimmingCharacters(in: .whitespaces) == "```" {
                blocks.append(current!.joined(separator: "\n") + "\n")
                current = nil
            } else {
                current!.append(line)
            }
        }
        return blocks
    }

    @Test func blocksAreFoundWithTheirFences() {
        let text = "a\n```swift\nlet x = 1\n```\n```sh\nls\n```\n  ```swift\nprint(2)\n  ```\n"
        #expect(Self.swiftBlocks(in: text) == ["let x = 1\n", "print(2)\n"])
    }

    @Test func everySwiftSnippetInTheReadmeCompiles() throws {
        // The README's library section lives in docs/libraries.md; both are read, as one text.
        let readme = try ["README.md", "docs/libraries.md"].map {
            try String(contentsOf: Self.packageRoot.appendingPathComponent($0), encoding: .utf8)
        }.joined(separator: "\n")
        let blocks = Self.swiftBlocks(in: readme)
        let manifests = blocks.filter { $0.hasPrefix("// swift-tools-version") }
        let programs = blocks.filter { !$0.hasPrefix("// swift-tools-version") }
        try #require(manifests.count == 1, "the README shows one Package.swift")
        try #require(manifests[0].contains(#".package(path: "../reachability")"#))
        try #require(programs.count >= 5, "the README's program snippets were not found")

        let files = FileManager.default
        let scratch = Self.packageRoot.appendingPathComponent(".build/readme-snippets")
        let package = scratch.appendingPathComponent("MyTool")
        let link = scratch.appendingPathComponent("reachability")
        try files.createDirectory(at: package, withIntermediateDirectories: true)
        if (try? files.destinationOfSymbolicLink(atPath: link.path)) != Self.packageRoot.path {
            try? files.removeItem(at: link)
            try files.createSymbolicLink(at: link, withDestinationURL: Self.packageRoot)
        }
        // Snippets removed from the README since the last run must not linger as targets.
        let sources = package.appendingPathComponent("Sources")
        try? files.removeItem(at: sources)
        let programNames = programs.indices.map { "Snippet\($0 + 1)" }
        for (name, program) in zip(["MyTool"] + programNames, [""] + programs) {
            let directory = sources.appendingPathComponent(name)
            try files.createDirectory(at: directory, withIntermediateDirectories: true)
            try program.write(to: directory.appendingPathComponent("main.swift"), atomically: true, encoding: .utf8)
        }
        let manifest = manifests[0] + """

            // Added by ReadmeSnippetTests: each program snippet of the README is its own executable.
            package.targets += \(programNames).map { .executableTarget(name: $0, dependencies: package.targets[0].dependencies) }

            """
        try manifest.write(to: package.appendingPathComponent("Package.swift"), atomically: true, encoding: .utf8)

        let (status, log) = try Self.swiftBuild(in: package, timeout: .seconds(600))
        #expect(status == 0, "swift build of the README's snippets failed:\n\(log)")
        let snippetWarnings = log.split(separator: "\n").filter { $0.contains("warning:") && $0.contains(sources.path) }
        #expect(snippetWarnings.isEmpty, "the README's snippets compile with warnings:\n\(snippetWarnings.joined(separator: "\n"))")
    }

    /// `swift build` in `directory` with the toolchain that runs these tests; the exit status and
    /// everything it printed. The build's output goes to a file (it can outgrow a pipe).
    static func swiftBuild(in directory: URL, timeout: Duration) throws -> (Int32, String) {
        let environment = ProcessInfo.processInfo.environment
        let searchPath = (environment["PATH"] ?? "").split(separator: ":").map(String.init) + ["/opt/swift/usr/bin"]
        guard let swift = searchPath.map({ $0 + "/swift" }).first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw ToolchainNotFound(searched: searchPath)
        }
        let logURL = directory.appendingPathComponent("build.log")
        _ = FileManager.default.createFile(atPath: logURL.path, contents: nil)
        let log = try FileHandle(forWritingTo: logURL)
        defer { try? log.close() }
        let process = ChildProcess.configured(swift, ["build", "--package-path", directory.path], output: log, error: log)
        let exited = DispatchSemaphore(value: 0)
        process.terminationHandler = { _ in exited.signal() }
        try process.run()
        let seconds = Double(timeout.components.seconds)
        if exited.wait(timeout: .now() + seconds) == .timedOut {
            process.terminate()
            exited.wait()
            return (-1, "timed out after \(timeout)\n" + ((try? String(contentsOf: logURL, encoding: .utf8)) ?? ""))
        }
        return (process.terminationStatus, (try? String(contentsOf: logURL, encoding: .utf8)) ?? "")
    }

    struct ToolchainNotFound: Error, CustomStringConvertible {
        var searched: [String]
        var description: String { "no 'swift' executable in \(searched.joined(separator: ":")): put the toolchain on PATH" }
    }
}
