import Foundation
import LinuxReachability
import ResumableDownloads
import Synchronization
import Testing
@testable import ReachabilityAgent
import ReachabilityAgent
import TestSupport

/// The control protocol without sockets: decoding/validation, the connection state machine and
/// the request handler (AgentService) against a download agent that never gets a usable path.
@Suite("Control protocol")
struct ControlProtocolTests {
    static func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    @Test(arguments: [
        (#"{"version":1,"id":1,"command":"list"}"#, ControlCommand.list),
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
        (#"{"version":1,"command":"metrics","format":"json"}"#, ControlErrorCode.invalidArgument),
        (#"{"version":1,"command":"metrics","format":7}"#, ControlErrorCode.malformed),
        (#"{"version":1,"command":"attach","settings":{}}"#, ControlErrorCode.invalidArgument),
        (#"{"version":1,"command":"attach","session":"s"}"#, ControlErrorCode.invalidArgument),
        (#"{"version":1,"command":"attach","session":"","settings":{}}"#, ControlErrorCode.invalidArgument),
        (#"{"version":1,"command":"attach","session":"a\u0000b","settings":{}}"#, ControlErrorCode.invalidArgument),
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

    /// Attached sessions leave the request slots: a program holding sessions still gets its
    /// `queue list` answered, and one uid cannot hold more than its share of either.
    @Test func attachedConnectionsHaveSlotsOfTheirOwn() {
        var admission = ControlAdmission()
        admission.attachedPerUser = 2
        var admitted = (0..<16).map { _ in admission.admit(uid: 1000) }
        #expect(admitted.allSatisfy { $0 })
        let seventeenth = admission.admit(uid: 1000)
        #expect(!seventeenth)
        let promoted = [admission.promote(uid: 1000), admission.promote(uid: 1000)]
        #expect(promoted == [true, true])
        admitted = [admission.admit(uid: 1000), admission.admit(uid: 1000)]
        #expect(admitted == [true, true], "promoted connections gave their request slots back")
        let third = admission.promote(uid: 1000)
        #expect(!third, "at most attachedPerUser")
        admission.release(uid: 1000, attached: true)
        let again = admission.promote(uid: 1000)
        #expect(again)
    }

    @Test func errorRepliesKeepTheRequestID() {
        guard case .failure(let rejection) = ControlCodec.decodeRequest(Self.bytes(#"{"version":2,"id":"abc","command":"list"}"#)) else {
            Issue.record("accepted"); return
        }
        #expect(rejection.id == .text("abc"))
    }

    @Test func requestsRoundTrip() throws {
        let commands: [ControlCommand] = [.list, .status, .metrics(.openMetrics), .metrics(.prometheus), .pause("ab"), .resume("ab"), .cancel("ab"),
                                          .add(url: URL(string: "https://example.org/f")!, output: "/o", sha256: nil)]
        for command in commands {
            let line = ControlCodec.encode(ControlRequest(id: .number(9), command: command))
            #expect(!line.contains(UInt8(ascii: "\n")))
            let (id, decoded) = try ControlCodec.decodeRequest(line).get()
            #expect(id == .number(9))
            #expect(decoded == command)
        }
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

    // MARK: connection state machine

    @Test func splitsLinesAcrossReads() {
        var machine = ControlConnectionStateMachine()
        #expect(machine.received(Self.bytes(#"{"version":1,"id":1,"com"#)) == [])
        #expect(machine.received(Self.bytes("mand\":\"list\"}\r\n{\"version\":1,\"id\":2,\"command\":\"status\"}\n\n"))
                == [.handle(.number(1), .list), .handle(.number(2), .status)])
        #expect(machine.endOfInput() == [.close])
        #expect(machine.received(Self.bytes("{}\n")) == [])
    }

    @Test func malformedLinesGetAnErrorAndTheConnectionGoesOn() {
        var machine = ControlConnectionStateMachine()
        let actions = machine.received(Self.bytes("garbage\n{\"version\":1,\"id\":2,\"command\":\"list\"}\n"))
        #expect(actions.count == 2)
        guard case .reply(let reply) = actions.first else { Issue.record("no reply"); return }
        #expect(!reply.ok && reply.error?.code == .malformed)
        #expect(actions.last == .handle(.number(2), .list))
    }

    @Test func oversizedLinesAreAnsweredOnceAndSkipped() {
        var machine = ControlConnectionStateMachine(maximumLineLength: 64)
        var actions = machine.received([UInt8](repeating: UInt8(ascii: "x"), count: 200))
        actions += machine.received([UInt8](repeating: UInt8(ascii: "y"), count: 10_000))
        #expect(actions == [.reply(.failure(.tooLarge(), id: nil))])
        actions = machine.received(Self.bytes("zzz\n{\"version\":1,\"command\":\"status\"}\n"))
        #expect(actions == [.handle(nil, .status)])
    }

    @Test func anUnterminatedLastLineIsHandledAtEndOfInput() {
        var machine = ControlConnectionStateMachine()
        #expect(machine.received(Self.bytes(#"{"version":1,"command":"list"}"#)) == [])
        #expect(machine.endOfInput() == [.handle(nil, .list), .close])
    }

    @Test func resolvesIDPrefixes() throws {
        let a = UUID(uuidString: "1F2E3D4C-0000-0000-0000-000000000001")!
        let b = UUID(uuidString: "1F2E9999-0000-0000-0000-000000000002")!
        #expect(try DownloadIDResolver.resolve("1f2e3", among: [a, b]).get() == a)
        #expect(try DownloadIDResolver.resolve(a.uuidString.lowercased(), among: [a, b]).get() == a)
        #expect(throws: ControlError.ambiguous("1f2e")) { try DownloadIDResolver.resolve("1f2e", among: [a, b]).get() }
        #expect(throws: ControlError.notFound("77")) { try DownloadIDResolver.resolve("77", among: [a, b]).get() }
    }

    // MARK: settings, summary, sd_notify environment

    @Test func parsesAgentConf() throws {
        let base = AgentSettings(maximumConcurrentDownloads: 4, allowsExpensive: true)
        let parsed = try AgentSettings.parse("# comment\nmax-concurrent = 2\r\nno-expensive=yes # trailing\n\n", base: base, path: "a")
        #expect(parsed == AgentSettings(maximumConcurrentDownloads: 2, allowsExpensive: false))
        #expect(try AgentSettings.parse("", base: base, path: "a") == base)
        #expect(throws: AgentFailure.self) { try AgentSettings.parse("max-concurrent=0", base: base, path: "a") }
        #expect(throws: AgentFailure.self) { try AgentSettings.parse("speed=3", base: base, path: "a") }
        #expect(throws: AgentFailure.self) { try AgentSettings.parse("no-expensive", base: base, path: "a") }
    }

    @Test func summaryNamesEachBusyState() {
        #expect(AgentService.summary([]) == "idle")
        #expect(AgentService.summary([.running, .running, .running, .waitingForConnectivity, .completed])
                == "3 downloading, 1 waiting for network")
        #expect(AgentService.summary([.queued, .paused, .paused]) == "1 queued, 2 paused")
    }

    @Test func watchdogIntervalIsHalfOfWatchdogUsec() {
        #expect(SystemdNotifier.watchdogInterval(environment: ["WATCHDOG_USEC": "20000000"], pid: 5) == .seconds(10))
        #expect(SystemdNotifier.watchdogInterval(environment: ["WATCHDOG_USEC": "20000000", "WATCHDOG_PID": "6"], pid: 5) == nil)
        #expect(SystemdNotifier.watchdogInterval(environment: ["WATCHDOG_USEC": "20000000", "WATCHDOG_PID": "5"], pid: 5) == .seconds(10))
        #expect(SystemdNotifier.watchdogInterval(environment: [:], pid: 5) == nil)
        #expect(!SystemdNotifier(environment: [:]).notify("READY=1"))
    }


    // MARK: request handler

    /// A service whose downloads wait forever: the path source says "offline" and nothing is sent.
    static func offlineService(_ directory: URL, events: EventSink) throws -> AgentService {
        try AgentStateDirectory.prepare(directory.path)
        let (paths, continuation) = AsyncStream.makeStream(of: NetworkPath.self)
        continuation.yield(.unsatisfied(.noInterfaceUp))
        let records = URL(fileURLWithPath: AgentStateDirectory.recordsDirectory(in: directory.path))
        return try AgentService(settings: AgentSettings(maximumConcurrentDownloads: 2, allowsExpensive: true), environment: .init(
            stateDirectory: directory.path,
            makeAgent: { settings in
                _ = continuation   // keeps the stream open
                return try DownloadAgent(configuration: .init(stateDirectory: records,
                                                              maximumConcurrentDownloads: settings.maximumConcurrentDownloads),
                                         paths: paths)
            },
            emit: { line in events.append(line) },
            summaryChanged: { events.append(JSONValue.object([.init(key: "summary", value: .string($0))]).serialized) }))
    }

    final class EventSink: Sendable {
        private let lines = Mutex<[String]>([])
        func append(_ line: String) {
            lines.withLock { $0.append(line) }
        }
        var all: [String] { lines.withLock { $0 } }
    }

    @Test func handlerAddsListsPausesResumesAndCancels() async throws {
        let scratch = try ScratchDirectory("au")
        let directory = scratch.url
        let events = EventSink()
        let service = try Self.offlineService(directory, events: events)
        #expect(await service.start() == 0)

        let added = await service.handle(.add(url: URL(string: "http://192.0.2.9/file.iso")!, output: nil, sha256: nil), id: .number(1))
        #expect(added.ok && added.id == .number(1))
        let download = try #require(added.download)
        #expect(download.destination == directory.path + "/files/file.iso")

        let list = await service.handle(.list, id: nil)
        #expect(list.downloads?.map(\.id) == [download.id])

        let paused = await service.handle(.pause(String(download.id.prefix(6))), id: nil)
        #expect(paused.download?.state == .paused)
        #expect(FileManager.default.contents(atPath: directory.path + "/agent-state.json").map { String(decoding: $0, as: UTF8.self) }?
            .contains(download.id.uppercased()) == true)

        let resumed = await service.handle(.resume(download.id), id: nil)
        #expect(resumed.download?.state != .paused)

        let unknown = await service.handle(.pause("ffffffff"), id: nil)
        #expect(unknown.error?.code == .notFound)

        let status = await service.handle(.status, id: nil)
        #expect(status.status?.maximumConcurrentDownloads == 2)

        let cancelled = await service.handle(.cancel(download.id), id: nil)
        #expect(cancelled.download?.state == .failed)
        let again = await service.handle(.pause(download.id), id: nil)
        #expect(again.error?.code == .invalidArgument)
        await service.shutdown()
        #expect(events.all.contains { $0.contains(#""type":"download","event":"queued""#) })
    }

    @Test func userPausesSurviveARestart() async throws {
        let scratch = try ScratchDirectory("au")
        let directory = scratch.url
        let first = try Self.offlineService(directory, events: EventSink())
        await first.start()
        let a = try #require(await first.handle(.add(url: URL(string: "http://192.0.2.9/a")!, output: nil, sha256: nil), id: nil).download)
        let b = try #require(await first.handle(.add(url: URL(string: "http://192.0.2.9/b")!, output: nil, sha256: nil), id: nil).download)
        _ = await first.handle(.pause(a.id), id: nil)
        await first.shutdown()

        let second = try Self.offlineService(directory, events: EventSink())
        #expect(await second.start() == 2)
        let states = Dictionary(uniqueKeysWithValues: (await second.handle(.list, id: nil).downloads ?? []).map { ($0.id, $0.state) })
        #expect(states[a.id] == .paused)
        #expect(states[b.id] != .paused)
        await second.shutdown()
    }
}
