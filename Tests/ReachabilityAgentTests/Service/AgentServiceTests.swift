import Foundation
import LinuxReachability
import LinuxSystem
import ResumableDownloads
import Synchronization
import Testing
@testable import ReachabilityAgent
import TestSupport
@testable import ReachabilityEvents

/// The request handler against a download agent that never gets a usable path, and the status summary.
@Suite("Agent service")
struct AgentServiceTests {
    @Test func summaryNamesEachBusyState() {
        #expect(AgentService.summary([]) == "idle")
        #expect(AgentService.summary([.running, .running, .running, .waitingForConnectivity, .completed])
                == "3 downloading, 1 waiting for network")
        #expect(AgentService.summary([.queued, .paused, .paused]) == "1 queued, 2 paused")
    }

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

    /// A background transfer keeps its session's rules within the agent's own: an agent started
    /// with --no-expensive or --no-roaming (or agent.conf) keeps background tasks off those paths
    /// as it does queued downloads.
    @Test func backgroundTransfersKeepTheAgentsCostRules() async throws {
        let scratch = try ScratchDirectory("ab")
        let service = try Self.offlineService(scratch.url, events: EventSink())
        let start = BackgroundRegistry.TransferStart(
            id: UUID(), session: BackgroundSessionKey(uid: 1000, identifier: "s"), url: "http://192.0.2.9/f", headers: [],
            timeout: 60, priority: 0.5, allowsExpensive: true, allowsRoaming: true, resumeState: nil, maximumConnections: 6)
        var options = await service.options(start)
        #expect(options.allowsExpensive && options.allowsRoaming && options.maximumConnections == 6)
        await service.reload(AgentSettings(maximumConcurrentDownloads: 2, allowsExpensive: false, allowsRoaming: false))
        options = await service.options(start)
        #expect(!options.allowsExpensive && !options.allowsRoaming)
        var refused = start
        refused.allowsRoaming = false
        await service.reload(AgentSettings(maximumConcurrentDownloads: 2, allowsExpensive: true))
        options = await service.options(refused)
        #expect(options.allowsExpensive && !options.allowsRoaming, "the session's own refusal stays")
        await service.shutdown()
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

        let list = await service.handle(.list(), id: nil)
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

    /// `queue add --connections 3 --no-constrained --priority high` reaches the download's own
    /// options; `queue list` and `agent status` report them, and a plain add keeps the defaults.
    @Test func jobChoicesReachTheDownloadsOptions() async throws {
        let scratch = try ScratchDirectory("aj")
        let service = try Self.offlineService(scratch.url, events: EventSink())
        #expect(await service.start() == 0)
        let job = QueueJobOptions(connections: 3, allowsConstrained: false, priority: .high)
        let added = try #require(await service.handle(.add(url: URL(string: "http://192.0.2.9/a")!, output: nil, sha256: nil,
                                                           job: job), id: nil).download)
        let plain = try #require(await service.handle(.add(url: URL(string: "http://192.0.2.9/b")!, output: nil, sha256: nil),
                                                      id: nil).download)
        let downloads = await service.agent.downloads
        let options = try #require(downloads.first { $0.id.uuidString.lowercased() == added.id }?.options)
        #expect(options.maximumConnections == 3 && !options.allowsConstrained && options.priority == DownloadPriority.high.value)
        let defaults = try #require(downloads.first { $0.id.uuidString.lowercased() == plain.id }?.options)
        #expect(defaults.maximumConnections == nil && defaults.allowsConstrained && defaults.priority == 0.5)

        let listed = await service.handle(.list(), id: nil).downloads ?? []
        #expect(listed.map(\.priority) == ["high", "normal"])
        #expect(listed.map(\.connections) == [3, nil] && listed.map(\.allowsConstrained) == [false, nil])
        #expect(await service.handle(.status, id: nil).status?.priorities == ["high": 1, "normal": 1])
        await service.shutdown()

        // The record keeps them: a restarted agent restores the job with its class and bound.
        let restarted = try Self.offlineService(scratch.url, events: EventSink())
        #expect(await restarted.start() == 2)
        let restored = (await restarted.handle(.list(), id: nil).downloads ?? []).first { $0.id == added.id }
        #expect(restored?.priority == "high" && restored?.connections == 3 && restored?.allowsConstrained == false)
        await restarted.shutdown()
    }

    /// `status` counts from the agent's census (issue 29) what `list` shows, through adds, a
    /// pause and a cancel; a `list` with `rows` sends a page and says how many it left out.
    @Test func statusCountsMatchTheListAndListPages() async throws {
        let scratch = try ScratchDirectory("ac")
        let service = try Self.offlineService(scratch.url, events: EventSink())
        #expect(await service.start() == 0)
        var ids: [String] = []
        for index in 0..<5 {
            let job = QueueJobOptions(priority: index == 0 ? .low : .normal)
            ids.append(try #require(await service.handle(.add(url: URL(string: "http://192.0.2.9/f\(index)")!, output: nil, sha256: nil,
                                                              job: job), id: nil).download?.id))
        }
        _ = await service.handle(.pause(ids[1]), id: nil)
        _ = await service.handle(.cancel(ids[2]), id: nil)
        let listed = await service.handle(.list(), id: nil).downloads ?? []
        let expected = Dictionary(grouping: listed, by: \.state.rawValue).mapValues(\.count)
        let status = try #require(await service.handle(.status, id: nil).status)
        #expect(status.counts == expected, "\(listed.map(\.state))")
        #expect(status.priorities?.values.reduce(0, +) == 4, "the cancelled one is not counted in a class")
        #expect(status.summary.contains("1 paused"), "\(status.summary)")

        let page = await service.handle(.list(rows: 2), id: nil)
        #expect(page.downloads?.map(\.id) == [ids[0], ids[1], ids[2]], "two unfinished first in line, the one finished")
        #expect(page.omittedDownloads == 2)
        await service.shutdown()
    }

    /// A `list` page answered from the census's order (issue 29: O(rows), not a state read per
    /// download) has the rows and the count the whole list's `ListPage` gives, with finished
    /// downloads between unfinished ones, and again after a cancelled one is resumed (it moves
    /// back among the unfinished, in its place).
    @Test func listPagesFromTheCensusMatchTheWholeList() async throws {
        let scratch = try ScratchDirectory("lp")
        let service = try Self.offlineService(scratch.url, events: EventSink())
        #expect(await service.start() == 0)
        let (peer, client) = try AgentServiceOwnershipTests.peer(id: 1, uid: CurrentProcess.effectiveUserID)
        defer { client.close() }
        var ids: [String] = []
        for index in 0..<12 {
            ids.append(try #require(await service.handle(.add(url: URL(string: "http://192.0.2.9/p\(index)")!, output: nil, sha256: nil),
                                                         id: nil).download?.id))
        }
        for index in [1, 4, 5, 9, 11] { _ = await service.handle(.cancel(ids[index]), id: nil) }
        func check(_ label: String) async throws {
            let every = await service.handle(.list(), id: nil).downloads ?? []
            for rows in [1, 2, 3, 7, 100] {
                let expected = ListPage(every, rows: rows) { [.completed, .failed].contains($0.state) }
                let page = try #require(service.answerWithoutWaiting(.list(rows: rows), id: nil, peer: peer))
                #expect(page.downloads?.map(\.id) == expected.rows.map(\.id), "\(label), rows \(rows)")
                #expect(page.omittedDownloads == expected.omitted, "\(label), rows \(rows)")
            }
            let whole = try #require(service.answerWithoutWaiting(.list(), id: nil, peer: peer))
            #expect(whole.downloads?.map(\.id) == every.map(\.id) && whole.omittedDownloads == nil, "\(label): every row without rows")
        }
        try await check("cancelled between")
        _ = await service.handle(.resume(ids[4]), id: nil)
        try await check("one resumed")
        await service.shutdown()
    }

    /// With background sessions present `list` goes through the actor, which left their
    /// downloads out by reading every download (O(jobs), issue 29). Its page now comes from the
    /// census without them: the rows and count the whole list's `ListPage` gives, with excluded
    /// downloads first and last in line (a page's edges) and between, and a page reads its rows
    /// and the excluded ones it meets, not the list.
    @Test func listPagesWithBackgroundDownloadsComeFromTheCensus() async throws {
        let scratch = try ScratchDirectory("lb")
        let service = try Self.offlineService(scratch.url, events: EventSink())
        #expect(await service.start() == 0)
        var ids: [String] = []
        for index in 0..<40 {
            ids.append(try #require(await service.handle(.add(url: URL(string: "http://192.0.2.9/b\(index)")!, output: nil, sha256: nil),
                                                         id: nil).download?.id))
        }
        let finished = [1, 4, 5, 9, 11, 20, 30, 37, 38, 39]
        for index in finished { _ = await service.handle(.cancel(ids[index]), id: nil) }
        // First and second unfinished, last finished, one between, and an identifier not listed.
        let excluded = [0, 2, 39, 20, 12].map { UUID(uuidString: ids[$0])! } + [UUID()]
        await service.treatAsBackground(Set(excluded))
        let every = await service.handle(.list(), id: nil).downloads ?? []
        #expect(every.count == 40 - 5, "the whole list leaves the background downloads out")
        for rows in [1, 2, 3, 7, 29, 100] {
            let expected = ListPage(every, rows: rows) { [.completed, .failed].contains($0.state) }
            let page = await service.handle(.list(rows: rows), id: nil)
            #expect(page.downloads?.map(\.id) == expected.rows.map(\.id), "rows \(rows)")
            #expect(page.omittedDownloads == expected.omitted, "rows \(rows)")
        }
        // The cost: entries read, not time. Unfinished: 0 and 2 excluded before the third row;
        // finished: 39 excluded before the last three rows (38, 37, 30).
        let agent = await service.agent
        let page = agent.census.page(rows: 3, excluding: Set(excluded))
        #expect(page.visited == (3 + 2) + (3 + 1), "read \(page.visited) entries of 40")
        #expect(page.listed == 35)
        #expect(agent.census.page(rows: 3).visited == 6)
        await service.shutdown()
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
        let states = Dictionary(uniqueKeysWithValues: (await second.handle(.list(), id: nil).downloads ?? []).map { ($0.id, $0.state) })
        #expect(states[a.id] == .paused)
        #expect(states[b.id] != .paused)
        await second.shutdown()
    }
}

extension AgentService {
    /// Treats `ids` as background sessions' downloads (as `backgroundEngineIDs` holds them).
    func treatAsBackground(_ ids: Set<UUID>) { backgroundEngineIDs = ids }
}
