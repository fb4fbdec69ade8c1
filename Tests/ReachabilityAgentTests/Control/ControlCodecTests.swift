import Foundation
import LinuxReachability
import ResumableDownloads
import Synchronization
import Testing
@testable import ReachabilityAgent
import TestSupport

/// Request and reply lines without sockets: decoding, validation, round trips.
@Suite("Control protocol lines")
struct ControlCodecTests {
    static func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    @Test(arguments: [
        (#"{"version":1,"id":1,"command":"list"}"#, ControlCommand.list()),
        (#"{"version":1,"id":"x","command":"status"}"#, .status),
        (#"{"version":1,"command":"metrics"}"#, .metrics(.openMetrics)),
        (#"{"version":1,"command":"metrics","format":"prometheus"}"#, .metrics(.prometheus)),
        (#"{"version":1,"command":"pause","download":"1f2e"}"#, .pause("1f2e")),
        (#"{"version":1,"command":"resume","download":"1f2e"}"#, .resume("1f2e")),
        (#"{"version":1,"command":"cancel","download":"1f2e"}"#, .cancel("1f2e")),
        (#"{"version":1,"command":"add","url":"http://h/x","output":"/tmp/x","sha256":"\#(String(repeating: "AB", count: 32))"}"#,
         .add(url: URL(string: "http://h/x")!, output: "/tmp/x", sha256: String(repeating: "ab", count: 32))),
    ])
    func decodesValidRequests(line: String, expected: ControlCommand) throws {
        let (_, command) = try ControlCodec.decodeRequest(Self.bytes(line)).get()
        #expect(command == expected)
    }

    @Test(arguments: [
        ("not json", ControlErrorCode.malformed),
        ("[1,2]", ControlErrorCode.malformed),
        (#"{"id":3,"command":"list"}"#, ControlErrorCode.malformed),
        (#"{"version":"1","command":"list"}"#, ControlErrorCode.malformed),
        (#"{"version":2,"id":3,"command":"list"}"#, ControlErrorCode.unsupportedVersion),
        (#"{"version":1,"command":"frobnicate"}"#, ControlErrorCode.unknownCommand),
        (#"{"version":1,"command":"add"}"#, ControlErrorCode.invalidArgument),
        (#"{"version":1,"command":"add","url":"ftp://h/x"}"#, ControlErrorCode.invalidArgument),
        (#"{"version":1,"command":"add","url":"http://h/x","output":"relative"}"#, ControlErrorCode.invalidArgument),
        (#"{"version":1,"command":"add","url":"http://h/x","sha256":"abc"}"#, ControlErrorCode.invalidArgument),
        (#"{"version":1,"command":"pause"}"#, ControlErrorCode.invalidArgument),
        (#"{"version":1,"command":"add","url":"http://h/x","connections":0}"#, ControlErrorCode.invalidArgument),
        (#"{"version":1,"command":"add","url":"http://h/x","connections":17}"#, ControlErrorCode.invalidArgument),
        (#"{"version":1,"command":"add","url":"http://h/x","connections":"4"}"#, ControlErrorCode.malformed),
        (#"{"version":1,"command":"add","url":"http://h/x","priority":"urgent"}"#, ControlErrorCode.invalidArgument),
        (#"{"version":1,"command":"add","url":"http://h/x","constrained":"no"}"#, ControlErrorCode.malformed),
        (#"{"version":1,"command":"metrics","format":"json"}"#, ControlErrorCode.invalidArgument),
        (#"{"version":1,"command":"metrics","format":7}"#, ControlErrorCode.malformed),
        (#"{"version":1,"command":"attach","settings":{}}"#, ControlErrorCode.invalidArgument),
        (#"{"version":1,"command":"attach","session":"s"}"#, ControlErrorCode.invalidArgument),
        (#"{"version":1,"command":"attach","session":"","settings":{}}"#, ControlErrorCode.invalidArgument),
        (#"{"version":1,"command":"attach","session":"a\u0000b","settings":{}}"#, ControlErrorCode.invalidArgument),
        (#"{"version":1,"command":"add","url":"http://h/x","clientKey":""}"#, ControlErrorCode.invalidArgument),
        (#"{"version":1,"command":"add","url":"http://h/x","clientKey":"a b"}"#, ControlErrorCode.invalidArgument),
        (#"{"version":1,"command":"add","url":"http://h/x","clientKey":"\u200bk"}"#, ControlErrorCode.invalidArgument),
        (#"{"version":1,"command":"taskAction","session":"s","taskIdentifier":1,"action":"explode"}"#, ControlErrorCode.invalidArgument),
        (#"{"version":1,"command":"taskAction","session":"s","action":"resume"}"#, ControlErrorCode.invalidArgument),
        (#"{"version":1,"command":"acknowledge","session":"s"}"#, ControlErrorCode.invalidArgument),
        (#"{"version":1,"command":"acknowledge","session":"s","sequence":-1}"#, ControlErrorCode.malformed),
        (#"{"version":1,"command":"createTask","session":"s","task":{"taskIdentifier":"one"}}"#, ControlErrorCode.malformed),
    ])
    func rejectsBadRequests(line: String, code: ControlErrorCode) {
        switch ControlCodec.decodeRequest(Self.bytes(line)) {
        case .success(let value): Issue.record("accepted \(value)")
        case .failure(let rejection): #expect(rejection.error.code == code)
        }
    }

    /// The agent starts a session's program from its own working directory: a relative path
    /// would name another file, so it is refused with a message saying what to give (issue 29).
    @Test(arguments: [(["bin/app"], false), (["./app", "-x"], false), (["../app"], false),
                      (["/usr/bin/app"], true), (["app"], true)])
    func relativeLaunchCommandsAreRefused(command: [String], isAccepted: Bool) {
        var settings = BackgroundSessionSettings()
        settings.launchCommand = command
        #expect((settings.problem == nil) == isAccepted, "\(settings.problem ?? "accepted")")
        if !isAccepted { #expect(settings.problem?.contains("absolute path") == true) }
    }

    /// Background session commands round-trip through the codec with their fields.
    @Test func backgroundCommandsRoundTrip() throws {
        var settings = BackgroundSessionSettings()
        settings.launchCommand = ["/usr/bin/app", "--events"]
        settings.isDiscretionary = true
        var spec = BackgroundTaskSpec(taskIdentifier: 3, url: "http://192.0.2.1/a.bin")
        spec.headers = ["Authorization: Bearer t"]
        spec.earliestBeginDate = 1_800_000_000
        let commands: [ControlCommand] = [
            .attach(session: "com.example", settings: settings),
            .createTask(session: "com.example", spec),
            .updateTask(session: "com.example", taskIdentifier: 3,
                        BackgroundTaskChanges(taskDescription: "song", earliestBeginDate: nil, expectedBytes: 5, priority: 1)),
            .taskAction(session: "com.example", taskIdentifier: 3, .cancelProducingResumeData),
            .acknowledge(session: "com.example", sequence: 7),
            .invalidate(session: "com.example"),
        ]
        for command in commands {
            let line = ControlCodec.encode(ControlRequest(id: .number(1), command: command))
            let (_, decoded) = try ControlCodec.decodeRequest(line).get()
            #expect(decoded == command)
        }
    }

    @Test func errorRepliesKeepTheRequestID() {
        guard case .failure(let rejection) = ControlCodec.decodeRequest(Self.bytes(#"{"version":2,"id":"abc","command":"list"}"#)) else {
            Issue.record("accepted"); return
        }
        #expect(rejection.id == .text("abc"))
    }

    @Test func requestsRoundTrip() throws {
        let commands: [ControlCommand] = [.list(), .list(rows: 7), .status, .metrics(.openMetrics), .metrics(.prometheus), .pause("ab"), .resume("ab"), .cancel("ab"),
                                          .add(url: URL(string: "https://example.org/f")!, output: "/o", sha256: nil),
                                          .add(url: URL(string: "https://example.org/f")!, output: nil, sha256: nil,
                                               job: QueueJobOptions(connections: 3, allowsConstrained: false, priority: .foreground)),
                                          .add(url: URL(string: "https://example.org/f")!, output: nil, sha256: nil,
                                               job: QueueJobOptions(connections: 16, priority: .low))]
        for command in commands {
            let line = ControlCodec.encode(ControlRequest(id: .number(9), command: command))
            #expect(!line.contains(UInt8(ascii: "\n")))
            let (id, decoded) = try ControlCodec.decodeRequest(line).get()
            #expect(id == .number(9))
            #expect(decoded == command)
        }
    }

    /// The job's choices are optional fields: an add from an older client (none of them) is a
    /// normal job, and an add with the defaults sends none of them (an older agent reads it).
    @Test func jobChoicesAreOptionalOnTheWire() throws {
        let old = #"{"version":1,"command":"add","url":"http://h/x"}"#
        let (_, command) = try ControlCodec.decodeRequest(Self.bytes(old)).get()
        #expect(command == .add(url: URL(string: "http://h/x")!, output: nil, sha256: nil, job: QueueJobOptions()))
        let line = String(decoding: ControlCodec.encode(ControlRequest(id: nil, command: command)), as: UTF8.self)
        #expect(!line.contains("priority") && !line.contains("connections") && !line.contains("constrained"), "\(line)")
        let chosen = #"{"version":1,"command":"add","url":"http://h/x","connections":4,"constrained":false,"priority":"high"}"#
        let (_, decoded) = try ControlCodec.decodeRequest(Self.bytes(chosen)).get()
        #expect(decoded == .add(url: URL(string: "http://h/x")!, output: nil, sha256: nil,
                                job: QueueJobOptions(connections: 4, allowsConstrained: false, priority: .high)))
    }

    @Test func responsesRoundTrip() throws {
        let response = ControlResponse.success(id: .number(4), downloads: [
            AgentDownload(id: "x", url: "http://h/", destination: "/d", state: .running, bytesReceived: 5,
                             totalBytes: nil, bytesPerSecond: 0, error: nil)])
        let line = ControlCodec.encode(response)
        #expect(try ControlCodec.decodeResponse(line) == response)
        let text = String(decoding: line, as: UTF8.self)
        #expect(text.hasPrefix(#"{"downloads":"#) && text.contains(#""version":1"#))
    }
}
