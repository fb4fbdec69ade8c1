/// Builds `--help` text and usage lines from the same tables the parser uses.
///
/// The layout follows swift-argument-parser: OVERVIEW, USAGE, ARGUMENTS, OPTIONS, SUBCOMMANDS,
/// labels padded to a column, long labels put their help on the next line.
enum HelpFormatter {
    /// Width of the label column, including its two-space indent.
    static let labelColumn = 26
    /// Wrap help text at this width.
    static let lineWidth = 80

    /// `reachability status [--json] [--netns <name>] [--classify <pattern=type> ...]`
    static func usage(for command: any Command.Type) -> String {
        var parts = [command.commandPath]
        for option in command.options {
            let repeatMark = option.kind == .repeatingValue ? " ..." : ""
            parts.append("[\(option.synopsis)\(repeatMark)]")
        }
        parts += command.positionals.map(\.synopsis)
        return parts.joined(separator: " ")
    }

    /// The top-level usage line.
    static var rootUsage: String { "\(CommandRegistry.toolName) <subcommand>" }

    /// Full help for one subcommand.
    static func help(for command: any Command.Type) -> String {
        var text = wrap("OVERVIEW: \(command.abstract)", indent: 0) + "\n\n"
        text += "USAGE: \(usage(for: command))\n\n"
        if !command.positionals.isEmpty {
            text += "ARGUMENTS:\n"
            text += command.positionals.map { row($0.synopsis, $0.help) }.joined()
            text += "\n"
        }
        text += "OPTIONS:\n"
        text += (command.options + [.help]).map { row($0.helpLabel, $0.help) }.joined()
        if let discussion = command.discussion {
            text += "\n" + wrap(discussion, indent: 0) + "\n"
        }
        let members = CommandRegistry.members(of: command.name)
        if !members.isEmpty {
            // `agent` is a command and also starts `agent status`.
            text += "\nSUBCOMMANDS:\n" + members.map { row(memberName($0, in: command.name), $0.abstract) }.joined()
            text += "\n  See '\(CommandRegistry.toolName) help \(command.name) <subcommand>' for detailed help.\n"
        }
        return text
    }

    /// `reachability queue <subcommand>`
    static func groupUsage(_ group: String) -> String { "\(CommandRegistry.toolName) \(group) <subcommand>" }

    /// Help for a group of subcommands (`reachability queue`), listing its members.
    static func groupHelp(_ group: String, members: [any Command.Type]) -> String {
        let abstract = CommandRegistry.groupAbstracts[group] ?? "The '\(group)' subcommands."
        var text = wrap("OVERVIEW: \(abstract)", indent: 0) + "\n\n"
        text += "USAGE: \(groupUsage(group))\n\n"
        text += "OPTIONS:\n" + row(Option.help.helpLabel, Option.help.help)
        text += "\nSUBCOMMANDS:\n" + members.map { row(memberName($0, in: group), $0.abstract) }.joined()
        text += "\n  See '\(CommandRegistry.toolName) help \(group) <subcommand>' for detailed help.\n"
        return text
    }

    /// `add` for `queue add` in group `queue`.
    static func memberName(_ command: any Command.Type, in group: String) -> String {
        command.name.split(separator: " ").dropFirst(group.split(separator: " ").count).joined(separator: " ")
    }

    /// Help for `reachability` itself, listing the subcommands.
    static func rootHelp() -> String {
        var text = wrap("OVERVIEW: \(CommandRegistry.abstract)", indent: 0) + "\n\n"
        text += "USAGE: \(rootUsage)\n\n"
        text += "OPTIONS:\n"
        text += row("--version", "Show the version.")
        text += row(Option.help.helpLabel, Option.help.help)
        text += "\nSUBCOMMANDS:\n"
        text += CommandRegistry.commands.map { row($0.name, $0.abstract) }.joined()
        text += row("help", "Show help for a subcommand.")
        text += "\n  See '\(CommandRegistry.toolName) help <subcommand>' for detailed help.\n"
        return text
    }

    /// `reachability help help`: the help command's own help.
    static func helpCommandHelp() -> String {
        var text = "OVERVIEW: Show help for a subcommand.\n\n"
        text += "USAGE: \(CommandRegistry.toolName) help [<subcommand> ...]\n\n"
        text += "ARGUMENTS:\n"
        text += row("<subcommand>", "A subcommand or group (such as 'queue' or 'queue add'); without one, the overview.")
        text += "\n  See '\(CommandRegistry.toolName) --help' for the subcommands.\n"
        return text
    }

    /// The block printed on stderr after a usage error.
    static func usageErrorText(_ error: UsageError, command: (any Command.Type)?) -> String {
        usageErrorText(error, usage: command.map(usage(for:)) ?? rootUsage,
                       helpCommand: command.map { "\($0.commandPath) --help" } ?? "\(CommandRegistry.toolName) --help")
    }

    /// The block printed on stderr after a usage error, with the usage line and help command given.
    static func usageErrorText(_ error: UsageError, usage: String, helpCommand: String) -> String {
        "Error: \(error.message)\nUsage: \(usage)\n  See '\(helpCommand)' for more information.\n"
    }

    /// One `  label    help` row, help wrapped and aligned.
    static func row(_ label: String, _ help: String) -> String {
        let indent = String(repeating: " ", count: labelColumn)
        let labelText = "  " + label
        // Wrapped as if every line were indented, then the first line's indent is replaced by the label.
        let helpText = wrap(help, indent: labelColumn).dropFirst(labelColumn)
        if labelText.count + 1 < labelColumn {
            return labelText + String(repeating: " ", count: labelColumn - labelText.count) + helpText + "\n"
        }
        return labelText + "\n" + indent + helpText + "\n"
    }

    /// Greedy word wrap; every line starts with `indent` spaces. Blank lines separate paragraphs.
    static func wrap(_ text: String, indent: Int) -> String {
        let prefix = String(repeating: " ", count: indent)
        return text.split(separator: "\n", omittingEmptySubsequences: false).map { paragraph -> String in
            if paragraph.isEmpty { return "" }
            // Lines that start with spaces are preformatted (tables, examples); keep them as they are.
            if paragraph.hasPrefix(" ") { return prefix + paragraph }
            var lines: [String] = []
            var line = prefix
            for word in paragraph.split(separator: " ") {
                if line.count > indent && line.count + 1 + word.count > lineWidth {
                    lines.append(line)
                    line = prefix
                }
                line += (line.count > indent ? " " : "") + word
            }
            lines.append(line)
            return lines.joined(separator: "\n")
        }.joined(separator: "\n")
    }
}
