import Testing
@testable import ReachabilityCLI

/// The option tables: each command's options are its table's rows, and the names the code looks
/// up by name (for messages and refused options) are rows of the tables it looks in.
@Suite("Option tables")
struct OptionTableTests {
    /// Every `option("...")` lookup in the commands, by the table it looks in.
    static let lookedUp: [(table: any OptionTable.Type, names: [String])] = [
        (TransportOptions.self, ["limit-rate", "cacert", "proxy", "no-proxy"]),
        (EventOutputOptions.self, ["json"]),
        (MetricsOptions.self, ["metrics-file", "metrics-interval"]),
        (DownloadCommand.self, ["output", "directory", "no-expensive", "header", "insecure"]),
        (QueueAddCommand.self, ["metalink", "mirror", "output", "sha256", "replace", "connections", "no-constrained", "priority"]),
        (UploadCommand.self, ["protocol", "method", "restart-plain"]),
    ]

    @Test func everyNameLookedUpIsARowOfItsTable() {
        for (table, names) in Self.lookedUp {
            for name in names {
                #expect(table.options.contains { $0.name == name && !$0.help.isEmpty }, "\(table) has no row --\(name)")
            }
        }
    }

    @Test func noCommandListsAnOptionTwice() {
        for command in CommandRegistry.commands {
            let names = command.options.map(\.name)
            #expect(Set(names).count == names.count, "\(command.name) lists an option twice: \(names)")
        }
    }

    /// A row's value lands where the row says, and an included group's rows land in the group.
    @Test func rowsStoreIntoTheCommandAndItsGroups() throws {
        let arguments = try ParsedArguments.parse(["--json", "--proxy", "", "--netns", "blue", "http://h/f"],
                                                  options: DownloadCommand.options, positionals: DownloadCommand.positionals)
        let command = try DownloadCommand(arguments: arguments)
        #expect(command.isJSON && !command.isQuiet)
        #expect(command.transport.proxy == "")
        #expect(command.monitor.networkNamespace == "blue")
        #expect(command.urls.map(\.absoluteString) == ["http://h/f"])
    }
}
