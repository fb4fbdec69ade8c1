import Foundation
import Testing
import TestSupport
@testable import ReachabilityCLI

/// The man page and completion scripts come from the option tables: every option of every
/// command appears in each, and the scripts work in their shells where those are installed.
@Suite("man page and completions")
struct GeneratorTests {
    static func run(_ executable: String, _ arguments: [String], input: String? = nil) throws -> (Int32, String, String) {
        let result = try ChildProcess.run(executable, arguments, environment: nil, input: Data((input ?? "").utf8))
        return (result.status, result.standardOutput, result.standardError)
    }

    @Test func everyOptionIsInTheManPageAndTheScripts() {
        let man = Generators.manPage()
        let scripts = [Generators.bash(), Generators.zsh(), Generators.fish()]
        for command in CommandRegistry.commands {
            #expect(man.contains(".SS \"reachability \(command.name)\""))
            for option in command.options {
                #expect(man.contains(Generators.roff("--\(option.name)")), "\(command.name) --\(option.name) not in the man page")
                for script in scripts {
                    #expect(script.contains("--\(option.name)") || script.contains("-l \(option.name)"),
                            "\(command.name) --\(option.name) missing from a completion script")
                }
            }
        }
    }

    @Test func roffEscapes() {
        #expect(Generators.roff(".start\n'quote") == "\\&.start\n\\&'quote")
        #expect(Generators.roff("a\\b-c") == "a\\eb\\-c")
    }

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/groff"), "groff is not installed"))
    func manPageRendersWithoutWarnings() throws {
        let (status, output, errors) = try Self.run("/usr/bin/groff", ["-man", "-Tutf8", "-ww", "-z"], input: Generators.manPage())
        #expect(status == 0)
        #expect(errors.isEmpty, "\(errors)")
        #expect(output.isEmpty)
    }

    @Test(arguments: [
        ("reachability ", ["status", "download", "queue", "help"]),
        ("reachability queue ", ["add", "list", "pause", "resume", "cancel"]),
        ("reachability download --h", ["--header", "--help"]),
        ("reachability download http://x/y --li", ["--limit-rate"]),
        ("reachability agent ", ["status", "--state-dir"]),
    ])
    func bashCompletes(line: String, expected: [String]) throws {
        let words = line.split(separator: " ", omittingEmptySubsequences: false).map(String.init)
        let quoted = words.map { Generators.shellQuoted($0) }.joined(separator: " ")
        let script = Generators.bash() + """
        COMP_WORDS=(\(quoted)); COMP_CWORD=\(words.count - 1); _reachability; printf '%s\\n' "${COMPREPLY[@]}"
        """
        let (status, output, errors) = try Self.run("/bin/bash", ["--norc", "-c", script])
        #expect(status == 0, "\(errors)")
        let offered = Set(output.split(separator: "\n").map(String.init))
        for word in expected { #expect(offered.contains(word), "\(line) should offer \(word): \(offered.sorted())") }
    }

    @Test func shellScriptsParse() throws {
        #expect(try Self.run("/bin/bash", ["-n"], input: Generators.bash()).0 == 0)
        for (shell, script) in [("/usr/bin/zsh", Generators.zsh()), ("/usr/bin/fish", Generators.fish())]
        where FileManager.default.isExecutableFile(atPath: shell) {
            let result = try Self.run(shell, ["-n"], input: script)
            #expect(result.0 == 0, "\(shell): \(result.2)")
        }
    }

    @Test func completionsRejectsAnUnknownShell() async {
        let harness = Harness()
        #expect(await harness.run(["completions", "bsh"]) == 64)
        #expect(harness.standardError.text.contains("Did you mean 'bash'?"))
    }
}
