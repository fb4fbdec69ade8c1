import Testing
@testable import ReachabilityCLI

/// Stand-ins for planned subcommands, to show a new command needs nothing but its own type.
struct FakeDownloadCommand: Command {
    static let name = "download"
    static let abstract = "Download URLs."
    static let output = Option.value("output", short: "o", valueName: "file", help: "Write to FILE.")
    static let directory = Option.value("directory", short: "d", valueName: "dir", help: "Write into DIR.")
    static let urls = Positional(name: "url", help: "What to download.", isRepeating: true)
    static let options = [output, directory]
    static let positionals = [urls]

    var urls: [String]
    var output: String?

    init(arguments: ParsedArguments) throws {
        urls = arguments.positional(Self.urls)
        output = arguments.value(Self.output)
        if output != nil && arguments.value(Self.directory) != nil {
            throw UsageError("'-o' and '-d' cannot be used together")
        }
        if output != nil && urls.count > 1 {
            throw UsageError("'-o' needs exactly one URL")
        }
    }

    func run(in context: CommandContext) async throws -> ExitCode {
        context.output.line("\(urls.joined(separator: " ")) -> \(output ?? ".")")
        return .success
    }
}

/// A stand-in with no options that does nothing: only its name and abstract differ.
protocol FakeEmptyCommand: Command {
    init()
}

extension FakeEmptyCommand {
    static var options: [Option] { [] }
    init(arguments: ParsedArguments) throws { self.init() }
    func run(in context: CommandContext) async throws -> ExitCode { .success }
}

struct FakeQueueAddCommand: FakeEmptyCommand {
    static let name = "queue add"
    static let abstract = "Queue a URL."
}

struct FakeQueueListCommand: FakeEmptyCommand {
    static let name = "queue list"
    static let abstract = "List the queue."
}

@Suite("Command registry")
struct CommandRegistryTests {
    // The real `download` and `queue ...` commands are left out so the fakes stand alone.
    static let commands: [any Command.Type] =
        CommandRegistry.commands.filter { !$0.name.hasPrefix("queue") && $0.name != "download" } + [FakeDownloadCommand.self, FakeQueueAddCommand.self, FakeQueueListCommand.self]

    @Test(arguments: [
        (["status", "--json"], "status", ["--json"]),
        (["download", "-o", "f", "u"], "download", ["-o", "f", "u"]),
        (["queue", "add", "u"], "queue add", ["u"]),
        (["queue", "list"], "queue list", []),
    ])
    func resolvesCommands(arguments: [String], name: String, rest: [String]) throws {
        guard case .command(let command, let remaining) = CommandRegistry.resolve(arguments, in: Self.commands) else {
            Issue.record("\(arguments) did not resolve to a command"); return
        }
        #expect(command.name == name)
        #expect(remaining == rest)
    }

    @Test func groupsAndUnknownWords() {
        guard case .group(let group, let members) = CommandRegistry.resolve(["queue", "frob"], in: Self.commands) else {
            Issue.record("queue is a group"); return
        }
        #expect(group == "queue")
        #expect(members.map { $0.name } == ["queue add", "queue list"])
        #expect(ReachabilityCommandLine.missingMember(of: group, members, after: ["queue", "frob"])
                == UsageError("Unknown subcommand 'queue frob' (expected one of: add, list)"))
        #expect(ReachabilityCommandLine.missingMember(of: group, members, after: ["queue"])
                == UsageError("Missing subcommand after 'queue' (expected one of: add, list)"))
        guard case .unknown("frob") = CommandRegistry.resolve(["frob", "status"], in: Self.commands) else {
            Issue.record("frob is unknown"); return
        }
    }

    @Test func aNewCommandGetsHelpUsageAndValidationFromItsTable() async throws {
        #expect(HelpFormatter.usage(for: FakeDownloadCommand.self)
                == "reachability download [--output <file>] [--directory <dir>] <url> ...")
        let help = HelpFormatter.help(for: FakeDownloadCommand.self)
        #expect(help.contains("\nARGUMENTS:\n  <url> ..."))
        #expect(help.contains("\n  -o, --output <file>     Write to FILE.\n"))

        let harness = Harness()
        #expect(await ReachabilityCommandLine.run(FakeDownloadCommand.self, arguments: ["-ofile.iso", "https://example.test/a"],
                                                  context: harness.context) == 0)
        #expect(harness.standardOutput.text == "https://example.test/a -> file.iso\n")

        let failing = Harness()
        #expect(await ReachabilityCommandLine.run(FakeDownloadCommand.self, arguments: ["-o", "f", "-d", "d", "u"],
                                                  context: failing.context) == 64)
        #expect(failing.standardError.lines == [
            "Error: '-o' and '-d' cannot be used together",
            "Usage: reachability download [--output <file>] [--directory <dir>] <url> ...",
            "  See 'reachability download --help' for more information.",
        ])
    }

    @Test func registeredNamesAreUnique() {
        let names = CommandRegistry.commands.map { $0.name } + ["help"]
        #expect(Set(names).count == names.count)
    }
}
