import Foundation
import ReachabilityBase
import ResumableDownloads
import Testing
@testable import ReachabilityAgent
@testable import ReachabilityCLI
@testable import ReachabilityEvents

/// Every numeric option, configuration key and environment knob against the texts issue 20
/// names (`--max-outage 1e16` once died with SIGILL): each gives a usage or configuration error
/// that names it and says what it expects, or the documented value (a limit beyond 100 years is
/// no limit). A trap here would end the test process, so it cannot pass by accident.
@Suite("numbers from options, configuration files and the environment")
struct ValueInputTests {
    static let texts = ["0", "-1", "1e16", "9e18", "9223372036854775807", "1e300", "inf", "nan", "0x10", " 5", "5 ", "1e99999"]

    /// Texts a limit in seconds accepts, and what they mean.
    static let limits: [String: Duration?] = [
        "0": .zero, "1e16": nil, "9e18": nil, "9223372036854775807": nil, "1e300": nil, "inf": nil, "1e99999": nil,
    ]

    enum Outcome: Equatable { case usage, accepted }

    /// Parses `command` with `arguments` the way the tool does, without running it.
    static func parse(_ command: any Command.Type, _ arguments: [String]) -> (Outcome, (any Command)?, String) {
        do {
            let parsed = try ParsedArguments.parse(arguments, options: command.options, positionals: command.positionals)
            return (.accepted, try command.init(arguments: parsed), "")
        } catch let error as UsageError {
            return (.usage, nil, error.message)
        } catch {
            return (.usage, nil, "not a usage error: \(error)")
        }
    }

    @Test(arguments: texts)
    func downloadMaximumOutage(text: String) throws {
        let (outcome, command, message) = Self.parse(DownloadCommand.self, ["--max-outage", text, "http://a/x"])
        if let expected = Self.limits[text] {
            #expect(outcome == .accepted, "\(message)")
            #expect((command as? DownloadCommand)?.maximumOutageWait == expected)
        } else {
            #expect(message.hasPrefix("The value '\(text)' is invalid for '--max-outage <seconds>': expected a number of seconds, 0 or more, or 'inf'"),
                    "\(message)")
        }
    }

    /// `queue add --connections` takes 1 to 16 (the agent bounds it further by its own per-server
    /// bound); every other text is a usage error (exit 64) naming the range.
    @Test(arguments: texts + ["1", "16", "17"])
    func queueAddConnections(text: String) throws {
        let (outcome, command, message) = Self.parse(QueueAddCommand.self, ["--connections", text, "http://a/x"])
        if let number = Int(text), (1...16).contains(number) {
            #expect(outcome == .accepted, "\(message)")
            #expect((command as? QueueAddCommand)?.job.connections == number)
        } else {
            #expect(message == "The value '\(text)' is invalid for '--connections <n>': expected a number from 1 to 16", "\(message)")
        }
    }

    /// `queue add --priority` takes BITS' four class names (any case), normal by default;
    /// `--no-constrained` keeps the job off constrained paths.
    @Test func queueAddPriorityAndConstrained() throws {
        for priority in DownloadPriority.allCases {
            let command = Self.parse(QueueAddCommand.self, ["--priority", priority.rawValue.uppercased(), "http://a/x"]).1 as? QueueAddCommand
            #expect(command?.job.priority == priority)
            #expect(command?.job.allowsConstrained == true)
        }
        let plain = Self.parse(QueueAddCommand.self, ["--no-constrained", "http://a/x"]).1 as? QueueAddCommand
        #expect(plain?.job == QueueJobOptions(allowsConstrained: false))
        let (outcome, _, message) = Self.parse(QueueAddCommand.self, ["--priority", "urgent", "http://a/x"])
        #expect(outcome == .usage)
        #expect(message == "The value 'urgent' is invalid for '--priority <class>': expected one of foreground, high, normal, low", "\(message)")
    }

    @Test(arguments: texts)
    func waitTimeout(text: String) throws {
        let (outcome, command, message) = Self.parse(WaitCommand.self, ["--timeout", text])
        if let limit = Self.limits[text] {
            // For `wait`, 0 waits for ever, as systemd-networkd-wait-online's --timeout=0 does.
            let expected: Duration? = limit == .zero ? nil : limit
            #expect(outcome == .accepted, "\(message)")
            #expect((command as? WaitCommand)?.timeoutDuration == expected)
        } else {
            #expect(message == "The value '\(text)' is invalid for '--timeout <seconds>': expected a number of seconds, 0 or more, or 'inf'")
        }
    }

    /// Options whose every text above is out of range or malformed.
    @Test(arguments: [
        (WatchCommand.self as any Command.Type, ["--metrics-file", "/m.prom", "--metrics-interval"], "a number of seconds from 1 to 86400"),
        (AgentCommand.self, ["--metrics-file", "/m.prom", "--metrics-interval"], "a number of seconds from 1 to 86400"),
        (DownloadCommand.self, ["http://a/x", "--limit-rate"], "bytes per second, like 500k or 2m, from 1 to 1024t"),
        (AgentCommand.self, ["--limit-rate"], "bytes per second, like 500k or 2m, from 1 to 1024t"),
        (AgentCommand.self, ["--max-concurrent"], "a number from 1 to 64"),
        (AgentCommand.self, ["--log-size"], "a number of bytes (k, m, g, t: 1024-based) from 1k to 1t"),
    ] as [(any Command.Type, [String], String)])
    func boundedOptions(command: any Command.Type, arguments: [String], expectation: String) {
        let option = arguments.last!
        for text in Self.texts {
            let (outcome, _, message) = Self.parse(command, arguments + [text])
            #expect(outcome == .usage, "\(command.name) \(option) \(text)")
            #expect(message.hasPrefix("The value '\(text)' is invalid for '\(option) <") && message.hasSuffix(": expected \(expectation)"),
                    "\(message)")
        }
    }

    @Test func boundedOptionsKeepTheirValidValues() throws {
        #expect((Self.parse(AgentCommand.self, ["--max-concurrent", "64", "--log-size", "2m", "--limit-rate", "1.5k"]).1
            as? AgentCommand).map { [$0.settings.maximumConcurrentDownloads, $0.logSizeLimit, Int($0.transport.maximumBytesPerSecond ?? 0)] }
            == [64, 2 << 20, 1536])
        #expect((Self.parse(WatchCommand.self, ["--metrics-file", "/m.prom", "--metrics-interval", "0.5e1"]).1 as? WatchCommand)?
            .metrics.interval == .seconds(5))
    }

    @Test(arguments: [("connectivity-interval", "whole seconds from 1 to 604800"),
                      ("connectivity-timeout", "a number of seconds above 0, at most 31536000")])
    func reachabilityConfSeconds(key: String, expectation: String) async {
        for text in Self.texts {
            let conf = "/home/tester/.config/reachability/reachability.conf"
            let harness = Harness(files: [conf: "connectivity-url=http://192.0.2.9/\n\(key)=\(text)\n"])
            // The line's padding is the file's syntax, not the value's: ' 5' and '5 ' are 5.
            let shown = text.trimmingCharacters(in: .whitespaces)
            #expect(await harness.run(["status"]) == (shown == "5" ? 0 : 78), "\(key)=\(text)")
            if shown != "5" {
                #expect(harness.standardError.text.hasPrefix("Error: \(conf):2: \(key): expected \(expectation), got '\(shown)'"),
                        "\(harness.standardError.text)")
            }
        }
    }

    /// As NetworkManager reads its keyfile: an unsigned number of seconds, anything else its
    /// default (300), at most a week, 0 turns the check off.
    @Test func networkManagerIntervalIsReadAsNetworkManagerReadsIt() {
        func interval(_ text: String) -> Duration?? {
            ConnectivityConfiguration.parseNetworkManager([("/nm.conf", "[connectivity]\nuri=http://192.0.2.9/\ninterval=\(text)\n")])
                .map(\.interval)
        }
        #expect(interval("600") == .some(.seconds(600)))
        #expect(interval("4294967295") == .some(.seconds(604_800)))
        for text in Self.texts where text != "0" {
            // Padding is the keyfile's syntax: ' 5' is 5.
            #expect(interval(text) == .some(text.contains("5") && text.count == 2 ? .seconds(5) : .seconds(300)), "\(text)")
        }
        #expect(interval("0") == nil, "0 turns NetworkManager's check off")
    }

    @Test(arguments: ["max-concurrent", "connections", "no-expensive"])
    func agentConfKeys(key: String) {
        let expectation = switch key {
        case "max-concurrent": "a number from 1 to 64"
        case "connections": "a number from 1 to 16"
        default: "true or false"
        }
        for text in Self.texts {
            let base = AgentSettings(maximumConcurrentDownloads: 4, allowsExpensive: true)
            do {
                let settings = try AgentSettings.parse("\(key)=\(text)\n", base: base, path: "/s/agent.conf")
                // Padding is the file's syntax: ' 5' is 5.
                let number = key == "connections" ? settings.maximumConnectionsPerHost : settings.maximumConcurrentDownloads
                #expect(key == "no-expensive" ? text == "0" && settings.allowsExpensive
                                              : text.count == 2 && number == 5, "\(key)=\(text)")
            } catch let failure as AgentFailure {
                let shown = text.trimmingCharacters(in: .whitespaces)
                #expect(failure.kind == .configuration)
                #expect(failure.message == "/s/agent.conf:1: \(key): expected \(expectation), got '\(shown)'", "\(failure.message)")
            } catch {
                Issue.record("\(error)")
            }
        }
    }

    /// The download command's knobs: a bad value stops it before anything starts (exit 78).
    @Test(arguments: [
        ("REACHABILITY_DOWNLOAD_STALL_TIMEOUT", "a number of seconds above 0, at most 86400"),
        ("REACHABILITY_DOWNLOAD_CONNECT_TIMEOUT", "a number of seconds above 0, at most 86400"),
        ("REACHABILITY_DOWNLOAD_CHECKPOINT_BYTES", "a number of bytes (k, m, g, t: 1024-based) from 1 to 1t"),
        ("REACHABILITY_DOWNLOAD_MAX_FAILURES", "a number from 0 to 1000000"),
    ])
    func downloadKnobs(name: String, expectation: String) async throws {
        for text in Self.texts {
            let harness = Harness(environment: ["HOME": "/home/tester", name: text])
            if name == "REACHABILITY_DOWNLOAD_MAX_FAILURES", text == "0" {
                #expect(try DownloadTuning(context: harness.context).maximumFailures == 0)
                continue
            }
            #expect(throws: CommandFailure(message: "\(name): expected \(expectation), got '\(text)'", exitCode: .configuration)) {
                try DownloadTuning(context: harness.context)
            }
            #expect(await harness.run(["download", "http://192.0.2.9/x"]) == 78)
            #expect(harness.standardError.text == "Error: \(name): expected \(expectation), got '\(text)'\n")
            #expect(harness.configurations.isEmpty, "no monitor was started")
        }
        let valid = Harness(environment: [name: name.hasSuffix("BYTES") ? "16m" : name.hasSuffix("FAILURES") ? "3" : "2.5"])
        #expect(try DownloadTuning(context: valid.context) != DownloadTuning(context: Harness().context))
    }

    @Test func agentRequestDeadlineKnob() async throws {
        let name = "REACHABILITY_CONTROL_REQUEST_DEADLINE"
        for text in Self.texts {
            let harness = Harness(environment: ["HOME": "/home/tester", name: text])
            #expect(await harness.run(["agent", "--state-dir", "/nonexistent/state"]) == 78)
            #expect(harness.standardError.text
                == "Error: \(name): expected a number of seconds above 0, at most 86400, got '\(text)'\n")
        }
    }

    @Test func systemdWatchdogTakesOnlyMicrosecondsInRange() {
        for text in Self.texts {
            #expect(SystemdNotifier.watchdogInterval(environment: ["WATCHDOG_USEC": text], pid: 7) == nil, "\(text)")
            #expect(SystemdNotifier.watchdogInterval(environment: ["WATCHDOG_USEC": "2000000", "WATCHDOG_PID": text], pid: 7) == nil)
        }
        #expect(SystemdNotifier.watchdogInterval(environment: ["WATCHDOG_USEC": "2000000", "WATCHDOG_PID": "7"], pid: 7) == .seconds(1))
    }

    /// `download --sha256`, `queue add --sha256` and the control protocol's `sha256` agree with
    /// the engine's one rule (`SHA256.normalizedHexDigest`): fullwidth digits are refused
    /// everywhere, capitals are accepted everywhere and kept in lowercase.
    @Test(arguments: [String(repeating: "aB", count: 32), String(repeating: "０", count: 64), String(repeating: "g", count: 64)])
    func digestsAreReadOneWay(hex: String) {
        let expected = SHA256.normalizedHexDigest(hex)
        let download = Self.parse(DownloadCommand.self, ["--sha256", hex, "http://a/x"]).1 as? DownloadCommand
        #expect(download?.expectedSHA256 == expected)
        let queued = Self.parse(QueueAddCommand.self, ["--sha256", hex, "http://a/x"]).1 as? QueueAddCommand
        #expect(queued?.expectedSHA256 == expected)
        let line = #"{"version":1,"command":"add","url":"http://a/x","sha256":"\#(hex)"}"#
        switch ControlCodec.decodeRequest(Array(line.utf8)) {
        case .success((_, .add(_, _, let sha256, _, _, _))): #expect(sha256 == expected && expected != nil)
        case .failure(let rejection): #expect(expected == nil && rejection.error.code == .invalidArgument)
        default: Issue.record("decoded to another command")
        }
    }
}
