import LinuxReachability
import Testing
@testable import ReachabilityCLI

@Suite("Argument parser")
struct ArgumentParserTests {
    static let options: [Option] = [
        .flag("json", help: "JSON."),
        .value("netns", valueName: "name", help: "Namespace."),
        .repeating("classify", valueName: "pattern=type", help: "Rule."),
        .value("output", short: "o", valueName: "file", help: "File."),
    ]

    struct Good: Sendable, CustomTestStringConvertible {
        var arguments: [String]
        var json = false
        var netns: String?
        var classify: [String] = []
        var output: String?
        var testDescription: String { arguments.joined(separator: " ") }
    }

    @Test(arguments: [
        Good(arguments: []),
        Good(arguments: ["--json"], json: true),
        Good(arguments: ["--json", "--json"], json: true),
        Good(arguments: ["--netns", "blue"], netns: "blue"),
        Good(arguments: ["--netns=blue"], netns: "blue"),
        Good(arguments: ["--netns", "red", "--netns=blue"], netns: "blue"),
        Good(arguments: ["--classify", "wl*=wifi", "--classify=usb0=cellular", "--json"],
             json: true, classify: ["wl*=wifi", "usb0=cellular"]),
        Good(arguments: ["-o", "file.iso"], output: "file.iso"),
        Good(arguments: ["-ofile.iso"], output: "file.iso"),
        Good(arguments: ["--output=-"], output: "-"),
        Good(arguments: ["--output", "-"], output: "-"),
        Good(arguments: ["--netns", "-1"], netns: "-1"),
    ])
    func parsesGoodArguments(_ good: Good) throws {
        let parsed = try ParsedArguments.parse(good.arguments, options: Self.options)
        #expect(parsed.isSet(Self.options[0]) == good.json)
        #expect(parsed.value(Self.options[1]) == good.netns)
        #expect(parsed.values(Self.options[2]) == good.classify)
        #expect(parsed.value(Self.options[3]) == good.output)
        #expect(!parsed.wantsHelp)
    }

    @Test(arguments: [
        (["--bogus"], "Unknown option '--bogus'"),
        (["--bogus=1"], "Unknown option '--bogus'"),
        (["-x"], "Unknown option '-x'"),
        (["--netns"], "Missing value for '--netns <name>'"),
        (["--netns", "--json"], "Missing value for '--netns <name>'"),
        (["--classify", "a=wifi", "--classify"], "Missing value for '--classify <pattern=type>'"),
        (["--json=yes"], "Option '--json' does not take a value"),
        (["extra"], "Unexpected argument 'extra'"),
        (["--", "--json"], "Unexpected argument '--json'"),
    ])
    func rejectsBadArguments(arguments: [String], message: String) {
        #expect(throws: UsageError(message)) {
            try ParsedArguments.parse(arguments, options: Self.options)
        }
    }

    @Test(arguments: [["--help"], ["-h"], ["--bogus", "--help"], ["--netns", "-h"]])
    func helpWinsOverEverythingElse(arguments: [String]) throws {
        #expect(try ParsedArguments.parse(arguments, options: Self.options).wantsHelp)
    }

    @Test func helpAfterDoubleDashIsAnArgument() {
        #expect(throws: UsageError("Unexpected argument '--help'")) {
            try ParsedArguments.parse(["--", "--help"], options: Self.options)
        }
    }

    @Test func positionalsAreAssignedInOrder() throws {
        let urls = Positional(name: "url", help: "URLs.", isRepeating: true)
        let parsed = try ParsedArguments.parse(["a", "--json", "b", "--", "-c"], options: Self.options, positionals: [urls])
        #expect(parsed.positional(urls) == ["a", "b", "-c"])
        #expect(parsed.isSet(Self.options[0]))
        #expect(throws: UsageError("Missing expected argument '<url> ...'")) {
            try ParsedArguments.parse([], options: Self.options, positionals: [urls])
        }
    }
}

@Suite("Command options")
struct CommandOptionTests {
    @Test func waitDefaults() throws {
        let wait = try WaitCommand(arguments: ParsedArguments.parse([], options: WaitCommand.options))
        #expect(wait.timeoutDuration == .seconds(120))
        #expect(wait.requirement == PathRequirement(connection: .any, allowsExpensive: true))
        #expect(wait.monitor.networkNamespace == nil)
    }

    @Test(arguments: [
        (["--timeout", "2.5"], Duration?.some(.milliseconds(2500))),
        (["--timeout=0"], nil),
        (["--timeout", "inf"], nil),
        (["--timeout", "1e-3"], .some(.milliseconds(1))),
        (["--timeout", "0.0001"], .some(.milliseconds(1))),
        (["--timeout", "1e300"], nil),
    ])
    func waitTimeouts(arguments: [String], expected: Duration?) throws {
        let wait = try WaitCommand(arguments: ParsedArguments.parse(arguments, options: WaitCommand.options))
        #expect(wait.timeoutDuration == expected)
    }

    @Test(arguments: [
        (["--require", "wifi", "--not-expensive"], PathRequirement(connection: .wifi, allowsExpensive: false)),
        (["--require=WIRED"], PathRequirement(connection: .wired, allowsExpensive: true)),
        (["--require", "cellular"], PathRequirement(connection: .cellular, allowsExpensive: true)),
        (["--require", "any"], PathRequirement(connection: .any, allowsExpensive: true)),
        (["--not-roaming"], PathRequirement(connection: .any, allowsExpensive: true, allowsRoaming: false)),
    ])
    func waitRequirements(arguments: [String], expected: PathRequirement) throws {
        let wait = try WaitCommand(arguments: ParsedArguments.parse(arguments, options: WaitCommand.options))
        #expect(wait.requirement == expected)
    }

    @Test func classifyAndNamespaceBecomeMonitorOptions() throws {
        let arguments = ["--netns", "blue", "--classify", "wl*=wifi", "--classify=usb0 = Cellular"]
        let status = try StatusCommand(arguments: ParsedArguments.parse(arguments, options: StatusCommand.options))
        #expect(status.monitor.networkNamespace == "blue")
        #expect(status.monitor.overrides == [
            ClassificationOverride(pattern: "wl*", type: .wifi, source: "--classify"),
            ClassificationOverride(pattern: "usb0", type: .cellular, source: "--classify"),
        ])
    }

    /// Usage errors raised while validating values, run through the whole tool: stderr, usage, exit 64.
    @Test(arguments: [
        (["wait", "--require", "ethernet"],
         "Error: The value 'ethernet' is invalid for '--require <kind>': expected one of wired, wifi, cellular, any, internet"),
        (["wait", "--timeout", "abc"],
         "Error: The value 'abc' is invalid for '--timeout <seconds>': expected a number of seconds, 0 or more, or 'inf'"),
        (["wait", "--timeout", "-1"],
         "Error: The value '-1' is invalid for '--timeout <seconds>': expected a number of seconds, 0 or more, or 'inf'"),
        (["wait", "--timeout=nan"],
         "Error: The value 'nan' is invalid for '--timeout <seconds>': expected a number of seconds, 0 or more, or 'inf'"),
        (["wait", "--timeout"], "Error: Missing value for '--timeout <seconds>'"),
        (["status", "--classify", "wlan0"],
         "Error: The value 'wlan0' is invalid for '--classify <pattern=type>': expected PATTERN=TYPE, got 'wlan0'"),
        (["status", "--classify", "=wifi"],
         "Error: The value '=wifi' is invalid for '--classify <pattern=type>': missing interface name pattern before '=' in '=wifi'"),
        (["watch", "--classify", "wlan0=radio"],
         "Error: The value 'wlan0=radio' is invalid for '--classify <pattern=type>': unknown type 'radio' (expected one of wired, wifi, cellular, loopback, other)"),
        (["status", "--netns", "a/b"],
         "Error: The value 'a/b' is invalid for '--netns <name>': expected a namespace name as listed by 'ip netns'"),
        (["status", "--netns="],
         "Error: The value '' is invalid for '--netns <name>': expected a namespace name as listed by 'ip netns'"),
        (["status", "--explain", "--bogus"], "Error: Unknown option '--bogus'"),
        (["watch", "--explain"], "Error: Unknown option '--explain'"),
        (["status", "now"], "Error: Unexpected argument 'now'"),
    ])
    func badValuesAreUsageErrors(arguments: [String], firstLine: String) async {
        let harness = Harness()
        let status = await harness.run(arguments)
        #expect(status == 64)
        #expect(harness.standardOutput.text.isEmpty)
        let lines = harness.standardError.lines
        #expect(lines.first == firstLine)
        #expect(lines.dropFirst().first?.hasPrefix("Usage: reachability \(arguments[0]) [") == true)
        #expect(lines.last == "  See 'reachability \(arguments[0]) --help' for more information.")
        #expect(harness.configurations.isEmpty, "no monitor is started for a usage error")
    }
}
