import Foundation
import Testing
import TestSupport

/// Every ```swift block of README.md and docs/libraries.md compiles as shown, in a package of its own that depends on
/// this one the way the README says.
///
/// The manifest block becomes a scratch package's `Package.swift` word for word; SwiftPM loads it
/// (`swift package describe`), which resolves `.package(path: "../reachability")` and
/// `package: "reachability"` as written, through a link named `reachability` beside the scratch
/// package, whatever this clone's directory is called; the products it names must be this
/// package's libraries. Each program block (its own `main.swift`, as a reader would paste it) is
/// type-checked in Swift 6 mode against the modules this build already made, importing none of
/// this package's modules but the products the manifest names. Building the scratch package
/// instead compiled the three libraries a second time (51 to 69 s on 2 busy cores, on CI each run);
/// this reuses the build under test (about 10 s). What it leaves out is linking the snippets,
/// which the package's own executables and tests do for the same libraries.
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

        // The manifest as written: loaded and resolved by SwiftPM, its products this package's.
        let files = FileManager.default
        let scratch = Self.packageRoot.appendingPathComponent(".build/readme-snippets")
        let package = scratch.appendingPathComponent("MyTool")
        let link = scratch.appendingPathComponent("reachability")
        try files.createDirectory(at: package, withIntermediateDirectories: true)
        if (try? files.destinationOfSymbolicLink(atPath: link.path)) != Self.packageRoot.path {
            try? files.removeItem(at: link)
            try files.createSymbolicLink(at: link, withDestinationURL: Self.packageRoot)
        }
        // Snippets removed from the README since the last run must not linger.
        let sources = package.appendingPathComponent("Sources")
        try? files.removeItem(at: sources)
        try files.createDirectory(at: sources.appendingPathComponent("MyTool"), withIntermediateDirectories: true)
        try "".write(to: sources.appendingPathComponent("MyTool/main.swift"), atomically: true, encoding: .utf8)
        try manifests[0].write(to: package.appendingPathComponent("Package.swift"), atomically: true, encoding: .utf8)
        let swift = try Self.toolchain("swift")
        let described = try ChildProcess.run(swift, ["package", "--package-path", package.path, "describe"], environment: nil)
        #expect(described.status == 0, "the README's Package.swift does not load:\n\(described)")
        let manifestText = try String(contentsOf: Self.packageRoot.appendingPathComponent("Package.swift"), encoding: .utf8)
        let libraries = Set(Self.names(after: ".library(name: \"", in: manifestText))
        let products = Self.names(after: ".product(name: \"", in: manifests[0])
        #expect(!products.isEmpty && Set(products).isSubset(of: libraries),
                "the README's Package.swift names \(products); this package's libraries are \(libraries.sorted())")

        // Each program, type-checked against this build's modules, as the manifest lets it import.
        let ownModules = Set(try files.contentsOfDirectory(atPath: Self.packageRoot.appendingPathComponent("Sources").path))
        let modules = try BuiltProducts.url("Modules").path
        var flags = ["-typecheck", "-swift-version", "6", "-I", modules]
        for module in ownModules.sorted() {
            let map = Self.packageRoot.appendingPathComponent("Sources/\(module)/module.modulemap").path
            if files.fileExists(atPath: map) { flags += ["-Xcc", "-fmodule-map-file=" + map] }
        }
        // CNetlink's headers are where Package.swift's pkgConfig finds them; the other C
        // libraries' are on the default path.
        let netlink = try ChildProcess.run("pkg-config", ["--cflags-only-I", "libnl-route-3.0"], environment: nil)
        flags += netlink.standardOutput.split(separator: " ").map(String.init).filter { $0.hasPrefix("-I") }.flatMap { ["-Xcc", $0] }
        let swiftc = try Self.toolchain("swiftc")
        for (index, program) in programs.enumerated() {
            let imported = Self.names(after: "import ", in: program).filter(ownModules.contains)
            #expect(Set(imported).isSubset(of: Set(products)),
                    "snippet \(index + 1) imports \(imported), the README's Package.swift gives it \(products)")
            let directory = sources.appendingPathComponent("Snippet\(index + 1)")
            try files.createDirectory(at: directory, withIntermediateDirectories: true)
            let file = directory.appendingPathComponent("main.swift")
            try program.write(to: file, atomically: true, encoding: .utf8)
            let checked = try ChildProcess.run(swiftc, flags + [file.path], environment: nil)
            #expect(checked.status == 0, "snippet \(index + 1) of the README does not compile:\n\(program)\n\(checked)")
            #expect(!checked.standardError.contains("warning:"),
                    "snippet \(index + 1) of the README compiles with warnings:\n\(checked.standardError)")
        }
    }

    /// The quoted names that follow `marker` in `text` (`.library(name: "X"` gives X), or for
    /// `import ` the module names of the import lines.
    static func names(after marker: String, in text: String) -> [String] {
        if marker == "import " {
            return text.split(separator: "\n").compactMap { line in
                let words = line.split(separator: " ")
                return words.count == 2 && words[0] == "import" ? String(words[1]) : nil
            }
        }
        return text.components(separatedBy: marker).dropFirst().compactMap { rest in
            rest.split(separator: "\"", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init)
        }
    }

    /// The toolchain's `name` (`swift`, `swiftc`): the one on PATH, else /opt/swift/usr/bin's.
    static func toolchain(_ name: String) throws -> String {
        let environment = ProcessInfo.processInfo.environment
        let searchPath = (environment["PATH"] ?? "").split(separator: ":").map(String.init) + ["/opt/swift/usr/bin"]
        guard let found = searchPath.map({ $0 + "/" + name }).first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw ToolchainNotFound(searched: searchPath)
        }
        return found
    }

    struct ToolchainNotFound: Error, CustomStringConvertible {
        var searched: [String]
        var description: String { "no Swift toolchain in \(searched.joined(separator: ":")): put the toolchain on PATH" }
    }
}
