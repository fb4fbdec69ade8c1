import Testing
@testable import ReachabilityCLI

@Suite("Help and dispatch")
struct HelpTests {
    static let commandNames = CommandRegistry.commands.map { $0.name }

    @Test(arguments: [["--help"], ["-h"], ["help"], ["help", "--help"]])
    func rootHelpListsSubcommands(arguments: [String]) async {
        let harness = Harness()
        #expect(await harness.run(arguments) == 0)
        let text = harness.standardOutput.text
        for heading in ["OVERVIEW: ", "USAGE: reachability <subcommand>", "OPTIONS:", "SUBCOMMANDS:", "--version"] {
            #expect(text.contains(heading))
        }
        for name in Self.commandNames {
            #expect(text.contains("\n  \(name) "), "SUBCOMMANDS lists \(name)")
        }
        #expect(harness.standardError.text.isEmpty)
    }

    @Test(arguments: commandNames)
    func subcommandHelpThreeWays(name: String) async throws {
        var texts: [String] = []
        let words = name.split(separator: " ").map(String.init)   // `queue add` is two arguments
        for arguments in [words + ["--help"], words + ["-h"], ["help"] + words, words + ["--json", "--bogus", "--help"]] {
            let harness = Harness()
            #expect(await harness.run(arguments) == 0, "\(arguments)")
            #expect(harness.standardError.text.isEmpty)
            texts.append(harness.standardOutput.text)
        }
        #expect(Set(texts).count == 1, "every way of asking prints the same help")
        let text = try #require(texts.first)
        #expect(text.hasPrefix("OVERVIEW: "))
        #expect(text.contains("\nUSAGE: reachability \(name)"))
        #expect(text.contains("\nOPTIONS:\n"))
        #expect(text.contains("  -h, --help"))
    }

    /// Help is generated from the option table the parser uses: every option is documented and accepted.
    @Test(arguments: CommandRegistry.commands.map { ObjectIdentifier($0) })
    func helpAndParserShareOneTable(id: ObjectIdentifier) throws {
        let command = try #require(CommandRegistry.commands.first { ObjectIdentifier($0) == id })
        let help = HelpFormatter.help(for: command)
        let usage = HelpFormatter.usage(for: command)
        for option in command.options {
            #expect(help.contains("  \(option.helpLabel)"))
            #expect(usage.contains("[\(option.synopsis)"))
            let arguments = option.takesValue ? ["--\(option.name)", "x"] : ["--\(option.name)"]
            let parsed = try ParsedArguments.parse(arguments, options: command.options)
            #expect(option.takesValue ? parsed.value(option) == "x" : parsed.isSet(option))
        }
    }

    @Test func statusHelpDocumentsExitStatusAndConfigFiles() async {
        let harness = Harness()
        #expect(await harness.run(["help", "status"]) == 0)
        let text = harness.standardOutput.text
        #expect(text.contains("USAGE: reachability status [--json] [--explain] [--all-interfaces] [--netns <name>] [--classify <pattern=type> ...]"))
        #expect(text.contains("EXIT STATUS: 0 when"))
        #expect(text.contains("/etc/reachability/classify.conf"))
    }

    @Test func longLabelsPutHelpOnTheNextLine() {
        let row = HelpFormatter.row("--classify <pattern=type>", "Rule.")
        #expect(row == "  --classify <pattern=type>\n" + String(repeating: " ", count: 26) + "Rule.\n")
        #expect(HelpFormatter.row("--json", "JSON.") == "  --json" + String(repeating: " ", count: 18) + "JSON.\n")
    }

    @Test func helpLinesFitEightyColumns() {
        let texts = [HelpFormatter.rootHelp()] + CommandRegistry.commands.map(HelpFormatter.help(for:))
        for line in texts.flatMap({ $0.split(separator: "\n") }) where !line.hasPrefix("USAGE:") {
            #expect(line.count <= 80, "\(line)")
        }
    }

    @Test func versionPrintsToStandardOutput() async {
        let harness = Harness()
        #expect(await harness.run(["--version"]) == 0)
        #expect(harness.standardOutput.text == "0.1.0\n")
    }

    @Test(arguments: [
        ([], "Error: Missing expected subcommand"),
        (["frobnicate"], "Error: Unknown subcommand 'frobnicate'"),
        (["--frobnicate"], "Error: Unknown option '--frobnicate'"),
        (["help", "frobnicate"], "Error: Unknown subcommand 'frobnicate'"),
        (["help", "status", "extra"], "Error: Unexpected argument 'extra'"),
        (["help", "--bogus"], "Error: Unknown subcommand '--bogus'"),
        (["help", "help", "extra"], "Error: Unexpected argument 'extra'"),
    ])
    func rootUsageErrors(arguments: [String], firstLine: String) async {
        let harness = Harness()
        #expect(await harness.run(arguments) == 64)
        #expect(harness.standardOutput.text.isEmpty)
        #expect(harness.standardError.lines == [
            firstLine,
            "Usage: reachability <subcommand>",
            "  See 'reachability --help' for more information.",
        ])
    }

    /// `help help` explains the help command (it said "Unknown subcommand 'help'. Did you mean 'help'?").
    @Test func helpHelpDescribesHelp() async {
        let harness = Harness()
        #expect(await harness.run(["help", "help"]) == 0)
        #expect(harness.standardOutput.text.hasPrefix("OVERVIEW: Show help for a subcommand.\n\nUSAGE: reachability help [<subcommand> ...]"))
        #expect(harness.standardError.text.isEmpty)
    }
}
