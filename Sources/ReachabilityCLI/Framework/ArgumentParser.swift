import ReachabilityBase

/// The result of parsing one command's arguments against its option table.
struct ParsedArguments: Sendable, Equatable {
    /// Long names of the flags that were given.
    private(set) var flags: Set<String> = []
    /// Values of value options by long name, in command-line order.
    private(set) var values: [String: [String]] = [:]
    /// Positional arguments by name, in order.
    private(set) var positionals: [String: [String]] = [:]
    /// Whether `-h`/`--help` was given; the parser stops looking at anything else then.
    private(set) var wantsHelp = false

    /// Whether the flag was given.
    func isSet(_ option: Option) -> Bool { flags.contains(option.name) }

    /// The option's value; the last one when it was given more than once.
    func value(_ option: Option) -> String? { values[option.name]?.last }

    /// The option's value read by `kind` (the last one when given more than once); nil when the
    /// option is absent, a usage error naming the option and what `kind` expects otherwise.
    func value<Kind: TextValueKind>(_ option: Option, as kind: Kind) throws(UsageError) -> Kind.Value? {
        guard let text = value(option) else { return nil }
        do {
            return try kind.parse(text)
        } catch {
            throw UsageError.invalidValue(text, for: option, error.description)
        }
    }

    /// Every value of a repeatable option, in command-line order.
    func values(_ option: Option) -> [String] { values[option.name] ?? [] }

    /// The values of a positional argument.
    func positional(_ positional: Positional) -> [String] { positionals[positional.name] ?? [] }

    // Over 60 lines on purpose: one pass over the arguments, every spelling (`--a b`, `--a=b`, `-ab`, `--`) handled where it is met.
    /// Parses `arguments` (everything after the subcommand name).
    ///
    /// Accepts `--name value`, `--name=value`, `-x value`, `-xvalue`, and `--` to end options.
    /// `-h`/`--help` anywhere before `--` wins over every other problem, as in swift-argument-parser.
    static func parse(_ arguments: [String], options: [Option], positionals: [Positional] = []) throws -> ParsedArguments {
        var result = ParsedArguments()
        let table = options + [.help]
        let optionArguments = arguments.prefix { $0 != "--" }
        if optionArguments.contains("--help") || optionArguments.contains("-h") {
            result.wantsHelp = true
            return result
        }

        var loose: [String] = []
        var index = arguments.startIndex
        var optionsEnded = false
        while index < arguments.endIndex {
            let argument = arguments[index]
            index += 1
            if optionsEnded || argument == "-" || !argument.hasPrefix("-") || looksLikeNegativeNumber(argument) {
                loose.append(argument)
                continue
            }
            if argument == "--" {
                optionsEnded = true
                continue
            }

            let (option, attachedValue) = try lookUp(argument, in: table)
            guard option.takesValue else {
                if attachedValue != nil { throw UsageError("Option '--\(option.name)' does not take a value") }
                result.flags.insert(option.name)
                continue
            }
            let value: String
            if let attachedValue {
                value = attachedValue
            } else if index < arguments.endIndex, !looksLikeOption(arguments[index]) {
                value = arguments[index]
                index += 1
            } else {
                throw UsageError("Missing value for '\(option.synopsis)'")
            }
            result.values[option.name, default: []].append(value)
        }

        try result.assign(loose, to: positionals)
        return result
    }

    /// The option `argument` names (`--name`, `--name=value`, `-x`, `-xvalue`), and the value written into it.
    private static func lookUp(_ argument: String, in table: [Option]) throws -> (Option, String?) {
        if argument.hasPrefix("--") {
            let body = argument.dropFirst(2)
            let name = body.prefix { $0 != "=" }
            let attachedValue = name.count < body.count ? String(body.dropFirst(name.count + 1)) : nil
            guard let found = table.first(where: { $0.name == name }) else {
                let names = table.map { "--\($0.name)" }
                throw UsageError("Unknown option '--\(name)'" + Suggestion.clause(for: "--\(name)", among: names))
            }
            return (found, attachedValue)
        }
        let letter = argument.dropFirst().first!
        guard let found = table.first(where: { $0.shortName == letter }) else {
            throw UsageError("Unknown option '\(argument)'")
        }
        let rest = argument.dropFirst(2)
        guard !rest.isEmpty else { return (found, nil) }
        guard found.takesValue else { throw UsageError("Unknown option '\(argument)'") }
        return (found, String(rest.hasPrefix("=") ? rest.dropFirst() : rest))
    }

    private mutating func assign(_ loose: [String], to declared: [Positional]) throws {
        var remaining = loose[...]
        for positional in declared {
            if positional.isRepeating {
                positionals[positional.name] = Array(remaining)
                remaining = []
            } else if let first = remaining.first {
                positionals[positional.name] = [first]
                remaining = remaining.dropFirst()
            }
            if !positional.isOptional && positionals[positional.name, default: []].isEmpty {
                throw UsageError("Missing expected argument '\(positional.synopsis)'")
            }
        }
        if let extra = remaining.first {
            throw UsageError("Unexpected argument '\(extra)'")
        }
    }

    /// A following argument is taken as a value unless it looks like an option, so that
    /// `--classify --json` reports the missing value instead of swallowing `--json`.
    private static func looksLikeOption(_ argument: String) -> Bool {
        argument.hasPrefix("-") && argument != "-" && !looksLikeNegativeNumber(argument)
    }

    private static func looksLikeNegativeNumber(_ argument: String) -> Bool {
        argument.count > 1 && argument.hasPrefix("-") && Double(argument.dropFirst()) != nil
    }
}
