import Foundation
import Testing

/// Issue 31: the module map must be true. docs/architecture.md holds two tables, and they are
/// the one source of truth: this reads them, every `import` under `Sources/` and Package.swift's
/// target dependencies, and fails when the three disagree. A new import is added by adding it
/// to the document's table in the same commit.
@Suite("the module map is true")
struct ArchitectureTests {
    static let packageRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// One row of the module-imports table.
    struct ModuleRow: Equatable {
        var project: Set<String>
        var toolchain: Set<String>
    }

    /// One row of the narrow-imports table: `module` may be imported by `file`, a path under
    /// `Sources/`, or by every file of a module when it ends in `/**`.
    struct NarrowRow: Hashable {
        var module: String
        var file: String
    }

    // MARK: Reading the document

    static func document() throws -> String {
        try String(contentsOf: packageRoot.appendingPathComponent("docs/architecture.md"), encoding: .utf8)
    }

    /// The cells of each row of the table between `<!-- checked: name -->` and `<!-- end: name -->`,
    /// header and separator left out, backticks dropped.
    static func tableRows(_ name: String, in text: String) -> [[String]] {
        guard let start = text.range(of: "<!-- checked: \(name) -->"),
              let end = text.range(of: "<!-- end: \(name) -->", range: start.upperBound..<text.endIndex) else { return [] }
        let lines = text[start.upperBound..<end.lowerBound].split(separator: "\n").filter { $0.hasPrefix("|") }
        return lines.dropFirst(2).map { line in
            line.split(separator: "|", omittingEmptySubsequences: false).dropFirst().dropLast()
                .map { $0.replacingOccurrences(of: "`", with: "").trimmingCharacters(in: .whitespaces) }
        }
    }

    static func names(_ cell: String) -> Set<String> {
        Set(cell.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty })
    }

    static func moduleTable(_ text: String) -> [String: ModuleRow] {
        var rows: [String: ModuleRow] = [:]
        for cells in tableRows("module-imports", in: text) where cells.count == 3 {
            rows[cells[0]] = ModuleRow(project: names(cells[1]), toolchain: names(cells[2]))
        }
        return rows
    }

    static func narrowTable(_ text: String) -> Set<NarrowRow> {
        Set(tableRows("narrow-imports", in: text).filter { $0.count == 3 }.map { NarrowRow(module: $0[0], file: $0[1]) })
    }

    // MARK: Reading the code

    /// Each module folder under `Sources/` that holds Swift files, with its files (paths relative
    /// to `Sources/`).
    static func sourceModules() throws -> [String: [String]] {
        let sources = packageRoot.appendingPathComponent("Sources")
        var modules: [String: [String]] = [:]
        for module in try FileManager.default.contentsOfDirectory(atPath: sources.path) {
            guard let walker = FileManager.default.enumerator(atPath: sources.appendingPathComponent(module).path) else { continue }
            while let path = walker.nextObject() as? String {
                if path.hasSuffix(".swift") { modules[module, default: []].append("\(module)/\(path)") }
            }
        }
        return modules
    }

    /// The modules a Swift file imports: `import X`, `@_exported import X`, `package import X`,
    /// `import struct X.Y`, inside `#if` or not. Comments and strings never start with `import`.
    static func imports(of text: String) -> Set<String> {
        let declaration = try! NSRegularExpression(pattern:
            #"^\s*(?:@\w+\s+)*(?:(?:public|package|internal|fileprivate|private)\s+)?import\s+(?:(?:struct|class|enum|protocol|func|var|let|typealias)\s+)?(\w+)"#,
            options: .anchorsMatchLines)
        var found: Set<String> = []
        for match in declaration.matches(in: text, range: NSRange(text.startIndex..., in: text)) {
            if let name = Range(match.range(at: 1), in: text) { found.insert(String(text[name])) }
        }
        return found
    }

    /// Package.swift's `dependencies:` of each target that lives in `Sources/<name>`.
    static func packageDependencies() throws -> [String: Set<String>] {
        let manifest = try String(contentsOf: packageRoot.appendingPathComponent("Package.swift"), encoding: .utf8)
        let target = try NSRegularExpression(pattern: #"\.(?:target|executableTarget)\(\s*name:\s*"(\w+)"\s*,\s*dependencies:\s*\[([^\]]*)\]([^\n]*)"#)
        var dependencies: [String: Set<String>] = [:]
        for match in target.matches(in: manifest, range: NSRange(manifest.startIndex..., in: manifest)) {
            guard let name = Range(match.range(at: 1), in: manifest), let list = Range(match.range(at: 2), in: manifest),
                  let rest = Range(match.range(at: 3), in: manifest) else { continue }
            // Targets with a `path:` elsewhere (tests, probes, samples, the benchmark driver) are not in the map.
            if manifest[rest].contains("path:") { continue }
            let quoted = try NSRegularExpression(pattern: #""(\w+)""#)
            let text = String(manifest[list])
            dependencies[String(manifest[name])] = Set(quoted.matches(in: text, range: NSRange(text.startIndex..., in: text)).compactMap {
                Range($0.range(at: 1), in: text).map { String(text[$0]) }
            })
        }
        return dependencies
    }

    // MARK: The checks

    @Test("the document's tables are there and name every module under Sources/")
    func tablesCoverEveryModule() throws {
        let text = try Self.document()
        let table = Self.moduleTable(text)
        let modules = try Self.sourceModules()
        #expect(modules.count >= 8, "found \(modules.count) Swift modules under \(Self.packageRoot.path)/Sources")
        #expect(Set(table.keys) == Set(modules.keys),
                "docs/architecture.md's module-imports table names \(table.keys.sorted()); Sources/ has \(modules.keys.sorted())")
        #expect(Self.narrowTable(text).count > 10, "docs/architecture.md's narrow-imports table is missing or empty")
    }

    @Test("each module imports exactly what the document's table allows")
    func moduleImportsMatchTheDocument() throws {
        let table = Self.moduleTable(try Self.document())
        for (module, files) in try Self.sourceModules().sorted(by: { $0.key < $1.key }) {
            var imported: Set<String> = []
            for file in files {
                imported.formUnion(Self.imports(of: try String(contentsOf: Self.packageRoot.appendingPathComponent("Sources/\(file)"),
                                                                encoding: .utf8)))
            }
            guard let row = table[module] else { continue }   // tablesCoverEveryModule says so
            let allowed = row.project.union(row.toolchain)
            #expect(imported.subtracting(allowed).isEmpty,
                    "\(module) imports \(imported.subtracting(allowed).sorted()), which docs/architecture.md's module-imports table does not allow: add them to its row (and Package.swift) or drop the import")
            #expect(allowed.subtracting(imported).isEmpty,
                    "docs/architecture.md allows \(module) \(allowed.subtracting(imported).sorted()), which none of its files imports: drop them from its row")
        }
    }

    @Test("Package.swift's dependencies are the document's project imports")
    func packageDependenciesMatchTheDocument() throws {
        let table = Self.moduleTable(try Self.document())
        let dependencies = try Self.packageDependencies()
        let modules = try Self.sourceModules()
        for (module, row) in table.sorted(by: { $0.key < $1.key }) {
            let declared = dependencies[module] ?? []
            #expect(declared == row.project,
                    "Package.swift gives \(module) the dependencies \(declared.sorted()); docs/architecture.md says \(row.project.sorted())")
            // A project module is one with a folder under Sources/ (Swift or a C shim); a toolchain
            // module never is.
            let folders = Set(try FileManager.default.contentsOfDirectory(atPath: Self.packageRoot.appendingPathComponent("Sources").path))
            #expect(row.project.isSubset(of: folders), "\(module)'s project column names \(row.project.subtracting(folders).sorted()), not modules of this package")
            #expect(row.toolchain.isDisjoint(with: folders), "\(module)'s toolchain column names modules of this package: \(row.toolchain.intersection(folders).sorted())")
        }
        #expect(!modules.isEmpty)
    }

    @Test("narrow imports (Glibc, Foundation, the C shims) appear only in the files the document names")
    func narrowImportsStayWhereTheDocumentSays() throws {
        let rows = Self.narrowTable(try Self.document())
        let narrowed = Set(rows.map(\.module))
        var importers: [String: Set<String>] = [:]
        for (_, files) in try Self.sourceModules() {
            for file in files {
                let text = try String(contentsOf: Self.packageRoot.appendingPathComponent("Sources/\(file)"), encoding: .utf8)
                for module in Self.imports(of: text) where narrowed.contains(module) { importers[module, default: []].insert(file) }
            }
        }
        for module in narrowed.sorted() {
            let named = rows.filter { $0.module == module }.map(\.file)
            let wholeModules = named.filter { $0.hasSuffix("/**") }.map { String($0.dropLast(2)) }
            let files = Set(named.filter { !$0.hasSuffix("/**") })
            let found = importers[module] ?? []
            let unlisted = found.filter { file in !files.contains(file) && !wholeModules.contains { file.hasPrefix($0) } }
            #expect(unlisted.isEmpty,
                    "\(unlisted.sorted()) import \(module), which docs/architecture.md's narrow-imports table does not allow there: use what LinuxSystem or FoundationEssentials offers, or add a row saying why")
            #expect(files.subtracting(found).isEmpty,
                    "docs/architecture.md lets \(files.subtracting(found).sorted()) import \(module), and they no longer do: drop the rows")
        }
    }

    @Test("the import reader sees every form of import and nothing else")
    func importReader() {
        let text = """
            import Glibc
            @_exported import ReachabilityBase
            @preconcurrency import Dispatch
            package import LinuxSystem
            import struct FoundationEssentials.Date
            #if canImport(Musl)
                import Musl
            #endif
            // import Foundation
            let text = "import Nothing"
            func important() {}
            """
        #expect(Self.imports(of: text) == ["Glibc", "ReachabilityBase", "Dispatch", "LinuxSystem", "FoundationEssentials", "Musl"])
    }

    // MARK: Function length

    /// Issue 31: a function or initialiser over `limit` lines needs a reason, a comment line above
    /// it saying "Over 60 lines" and why. Returns "path:line name (N lines)" for each one without.
    /// Braces are counted on each line with string literals and `//` comments taken out (the
    /// count scripts/long-functions.py makes, which also lists the ones with a reason).
    static func longFunctionsWithoutReason(in text: String, path: String, limit: Int = 60) -> [String] {
        let declaration = try! NSRegularExpression(pattern:
            #"^\s*(?:@\w+(?:\([^)]*\))?\s+)*(?:(?:public|package|private|fileprivate|internal|static|class|override|mutating|nonmutating|nonisolated|final|convenience|required)\s+)*(func\s+[^\s(<]+|init[?!]?|deinit)\b"#)
        let literal = try! NSRegularExpression(pattern: #""(?:\\.|[^"\\])*""#)
        let lines = text.components(separatedBy: "\n")
        let code = lines.map { line -> String in
            let plain = literal.stringByReplacingMatches(in: line, range: NSRange(line.startIndex..., in: line), withTemplate: "\"\"")
            return plain.components(separatedBy: "//")[0]
        }
        var found: [String] = []
        for (start, line) in lines.enumerated() {
            guard let match = declaration.firstMatch(in: line, range: NSRange(line.startIndex..., in: line)),
                  let name = Range(match.range(at: 1), in: line) else { continue }
            var depth = 0, opened = false, end: Int?
            for index in start..<min(lines.count, start + 2000) {
                for character in code[index] {
                    if character == "{" { depth += 1; opened = true } else if character == "}" { depth -= 1 }
                }
                if opened && depth <= 0 { end = index; break }
                if !opened && index > start + 15 { break }
            }
            guard let end, end - start + 1 > limit else { continue }
            var above = start - 1
            while above >= 0, lines[above].trimmingCharacters(in: .whitespaces).hasPrefix("@") { above -= 1 }
            var hasReason = false
            while above >= 0, lines[above].trimmingCharacters(in: .whitespaces).hasPrefix("//") {
                hasReason = hasReason || lines[above].lowercased().contains("over 60 lines")
                above -= 1
            }
            if !hasReason { found.append("\(path):\(start + 1) \(line[name]) (\(end - start + 1) lines)") }
        }
        return found
    }

    @Test("no function under Sources/ is over 60 lines without a one-line reason above it")
    func longFunctionsGiveTheirReason() throws {
        let sources = Self.packageRoot.appendingPathComponent("Sources")
        var found: [String] = []
        for path in try Self.sourceModules().values.joined().sorted() {
            let text = try String(contentsOf: sources.appendingPathComponent(path), encoding: .utf8)
            found += Self.longFunctionsWithoutReason(in: text, path: path)
        }
        #expect(found == [], "split these where a piece has its own name, or say why above them (// Over 60 lines: ...)")
    }

    @Test("the length reader counts a function's lines, skips braces in strings and comments, and sees a reason")
    func lengthReader() {
        let body = Array(repeating: "        x += 1", count: 59).joined(separator: "\n")
        let long = "    func long() {\n        let brace = \"}\" // }\n\(body)\n    }"
        #expect(Self.longFunctionsWithoutReason(in: long, path: "A.swift") == ["A.swift:1 func long (62 lines)"])
        #expect(Self.longFunctionsWithoutReason(in: "    /// Doc.\n    // Over 60 lines: one table.\n    @inline(never)\n" + long,
                                                path: "A.swift") == [])
        let short = "    init() {\n\(Array(repeating: "        x += 1", count: 58).joined(separator: "\n"))\n    }"
        #expect(Self.longFunctionsWithoutReason(in: short, path: "A.swift") == [])
    }

    @Test("the table reader reads the document's form")
    func tableReader() {
        let text = """
            <!-- checked: module-imports -->
            | Module | Project | Toolchain |
            |---|---|---|
            | `A` | B, C | Glibc |
            | D | | |
            <!-- end: module-imports -->
            """
        #expect(Self.moduleTable(text) == ["A": ModuleRow(project: ["B", "C"], toolchain: ["Glibc"]),
                                           "D": ModuleRow(project: [], toolchain: [])])
    }
}
