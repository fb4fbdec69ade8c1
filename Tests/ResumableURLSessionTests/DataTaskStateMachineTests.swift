import Foundation
import Testing
@testable import ResumableURLSession

/// The data task's decisions, without sockets: inputs in, actions out.
@Suite("Data task state machine")
struct DataTaskStateMachineTests {
    typealias Machine = DataTaskStateMachine
    static let head = Machine.Response(statusCode: 200, headers: ["Content-Type": "application/json"],
                                       url: URL(string: "http://127.0.0.1/search")!)
    static let part1 = Data("{\"results\":".utf8)
    static let part2 = Data("[]}".utf8)

    static func exchanging(waits: Bool = false, retries: Bool = false, on interface: String = "eth0") -> Machine {
        var machine = Machine(options: .init(waitsForConnectivity: waits, retriesAfterPathChange: retries))
        #expect(machine.handle(.path(.through(interface))) == [], "a path before resume starts nothing")
        #expect(machine.publicState == .suspended)
        #expect(machine.handle(.resume) == [.startResourceTimer, .startExchange])
        #expect(machine.publicState == .running)
        return machine
    }

    @Test func aRequestDeliversTheResponseThenTheBodyThenSuccess() {
        var machine = Self.exchanging()
        #expect(machine.handle(.response(Self.head)) == [.deliverResponse(Self.head)])
        // Bytes that arrive while the delegate decides are held, not delivered before it allows.
        #expect(machine.handle(.body(Self.part1)) == [])
        #expect(machine.handle(.responseAnswered(allow: true)) == [.deliverData(Self.part1)])
        #expect(machine.handle(.body(Self.part2)) == [.deliverData(Self.part2)])
        #expect(machine.handle(.exchangeFinished(nil)) == [.complete(nil)])
        #expect(machine.publicState == .completed)
        #expect(machine.bytesReceived == Int64(Self.part1.count + Self.part2.count))
        #expect(machine.response == Self.head)
        #expect(machine.failure == nil)
        #expect(machine.handle(.cancel) == [], "a completed task ignores cancel")
    }

    @Test func anEndWhileTheDelegateDecidesWaitsForItsAnswer() {
        var machine = Self.exchanging()
        _ = machine.handle(.response(Self.head))
        #expect(machine.handle(.body(Self.part1)) == [])
        #expect(machine.handle(.body(Self.part2)) == [])
        #expect(machine.handle(.exchangeFinished(nil)) == [])
        #expect(machine.publicState == .running)
        #expect(machine.handle(.responseAnswered(allow: true)) == [.deliverData(Self.part1 + Self.part2), .complete(nil)])
    }

    @Test func aRefusedResponseCancelsTheExchange() {
        var machine = Self.exchanging()
        _ = machine.handle(.response(Self.head))
        #expect(machine.handle(.responseAnswered(allow: false)) == [.abortExchange, .complete(.cancelled)])
        #expect(machine.handle(.body(Self.part1)) == [], "nothing after the end")
        #expect(machine.handle(.exchangeFinished(nil)) == [])
    }

    @Test func aPathLostMidRequestFailsAtOnceWithNetworkConnectionLost() throws {
        var machine = Self.exchanging()
        _ = machine.handle(.response(Self.head))
        _ = machine.handle(.responseAnswered(allow: true))
        let actions = machine.handle(.path(.unusable))
        #expect(actions.first == .abortExchange)
        guard case .complete(let failure?) = actions.last else { Issue.record("no failure: \(actions)"); return }
        #expect(failure.code == .networkConnectionLost)
        #expect(machine.publicState == .completed)
        #expect(machine.handle(.exchangeFinished(.init(code: .cancelled, description: "aborted"))) == [],
                "the aborted exchange's own end is not a second completion")
    }

    @Test func theRequestsInterfaceGoingAwayIsALossABetterOneAppearingIsNot() {
        var machine = Self.exchanging(on: "wlan0")
        #expect(machine.handle(.path(.through("wlan0"))) == [], "a repeat of the same path")
        #expect(machine.handle(.path(.usable(primary: nil, up: []))) == [], "unknown interfaces: keep going")
        #expect(machine.handle(.path(.usable(primary: "eth0", up: ["eth0", "wlan0"]))) == [],
                "ethernet plugged in beside the Wi-Fi the request uses")
        let actions = machine.handle(.path(.through("wwan0")))
        guard case .complete(let failure?) = actions.last else { Issue.record("no failure: \(actions)"); return }
        #expect(failure.code == .networkConnectionLost)
    }

    @Test func anIdempotentRequestIsRetriedOnceWhenTheCallerOptedIn() {
        var machine = Self.exchanging(retries: true)
        #expect(machine.handle(.path(.unusable)) == [.abortExchange, .startConnectivityGrace])
        #expect(machine.publicState == .running)
        #expect(machine.handle(.path(.through("wlan0"))) == [.startExchange])
        // The second loss is final.
        let actions = machine.handle(.path(.unusable))
        guard case .complete(let failure?) = actions.last else { Issue.record("no failure: \(actions)"); return }
        #expect(failure.code == .networkConnectionLost)
    }

    @Test func aConnectionLostByTheTransportIsRetriedOnceToo() {
        let lost = Machine.Failure(code: .networkConnectionLost, description: "the path moved")
        var machine = Self.exchanging(retries: true)
        #expect(machine.handle(.exchangeFinished(lost)) == [.startExchange], "the path is still usable here: at once")
        #expect(machine.handle(.exchangeFinished(lost)) == [.complete(lost)])
        var plain = Self.exchanging()
        #expect(plain.handle(.exchangeFinished(lost)) == [.complete(lost)], "without the opt-in it fails")
    }

    @Test func aRetryWhosePathNeverReturnsFailsWithTheLoss() {
        var machine = Self.exchanging(retries: true)
        _ = machine.handle(.path(.unusable))
        guard case .complete(let failure?) = machine.handle(.connectivityGraceExpired).last else {
            Issue.record("no failure"); return
        }
        #expect(failure.code == .networkConnectionLost)
    }

    @Test func noRetryOnceTheDelegateHasTheResponse() {
        var machine = Self.exchanging(retries: true)
        _ = machine.handle(.response(Self.head))
        let actions = machine.handle(.path(.unusable))
        #expect(actions.first == .abortExchange)
        guard case .complete(let failure?) = actions.last else { Issue.record("no failure: \(actions)"); return }
        #expect(failure.code == .networkConnectionLost)
    }

    @Test func startedOfflineWithWaitsForConnectivityItWaitsThenRuns() {
        var machine = Machine(options: .init(waitsForConnectivity: true))
        _ = machine.handle(.path(.unusable))
        #expect(machine.handle(.resume) == [.startResourceTimer, .notifyWaitingForConnectivity])
        #expect(machine.publicState == .running)
        #expect(machine.handle(.connectivityGraceExpired) == [], "no grace when it waits")
        #expect(machine.handle(.path(.unusable)) == [])
        #expect(machine.handle(.path(.through("eth0"))) == [.startExchange])
        _ = machine.handle(.response(Self.head))
        _ = machine.handle(.responseAnswered(allow: true))
        #expect(machine.handle(.exchangeFinished(nil)) == [.complete(nil)])
    }

    @Test func startedOfflineWithoutWaitingItFailsAfterTheGraceWithNotConnected() {
        var machine = Machine(options: .init(waitsForConnectivity: false))
        _ = machine.handle(.path(.unusable))
        #expect(machine.handle(.resume) == [.startResourceTimer, .startConnectivityGrace])
        guard case .complete(let failure?) = machine.handle(.connectivityGraceExpired).last else {
            Issue.record("no failure"); return
        }
        #expect(failure.code == .notConnectedToInternet)
    }

    @Test func aPathWithinTheGraceStartsTheRequest() {
        var machine = Machine(options: .init(waitsForConnectivity: false))
        _ = machine.handle(.path(.unusable))
        _ = machine.handle(.resume)
        #expect(machine.handle(.path(.usable(primary: nil, up: []))) == [.startExchange])
        #expect(machine.handle(.connectivityGraceExpired) == [], "the grace is over once it runs")
    }

    @Test func theResourceTimeoutEndsAWait() {
        var machine = Machine(options: .init(waitsForConnectivity: true))
        _ = machine.handle(.path(.unusable))
        _ = machine.handle(.resume)
        guard case .complete(let failure?) = machine.handle(.resourceTimeoutExpired).last else {
            Issue.record("no failure"); return
        }
        #expect(failure.code == .timedOut)
    }

    @Test func anExchangeThatFailsBeforeAResponseEndsWithItsError() {
        var machine = Self.exchanging()
        let refused = Machine.Failure(code: .cannotConnectToHost, description: "connection refused")
        #expect(machine.handle(.exchangeFinished(refused)) == [.complete(refused)])
        #expect(machine.failure == refused)
    }

    @Test func cancelBeforeAndDuring() {
        var idle = Machine(options: .init(waitsForConnectivity: false))
        #expect(idle.handle(.cancel) == [.complete(.cancelled)])
        #expect(idle.handle(.resume) == [], "a cancelled task does not start")
        var running = Self.exchanging()
        #expect(running.handle(.cancel) == [.abortExchange, .complete(.cancelled)])
    }

    @Test func suspendHoldsATaskThatHasNotStarted() {
        var machine = Machine(options: .init(waitsForConnectivity: true))
        _ = machine.handle(.path(.unusable))
        _ = machine.handle(.resume)
        #expect(machine.handle(.suspend) == [])
        #expect(machine.publicState == .suspended)
        #expect(machine.handle(.path(.through("eth0"))) == [], "a suspended task does not start")
        #expect(machine.handle(.resume) == [.startExchange])
        #expect(machine.handle(.suspend) == [], "a running exchange is not paused")
        #expect(machine.publicState == .running)
    }

    @Test func sentBytesAreMonotonicAcrossARetry() {
        var machine = Self.exchanging(retries: true)
        #expect(machine.handle(.sent(bytes: 100, total: 300)) == [.notifySent(bytes: 100, total: 100, expected: 300)])
        _ = machine.handle(.path(.unusable))
        _ = machine.handle(.path(.through("eth0")))
        #expect(machine.handle(.sent(bytes: 50, total: 300)) == [], "the retry resends from zero")
        #expect(machine.handle(.sent(bytes: 300, total: 300)) == [.notifySent(bytes: 200, total: 300, expected: 300)])
        #expect(machine.bytesSent == 300)
        #expect(machine.bytesExpectedToSend == 300)
    }

    // MARK: resumable uploads

    static func uploading(waits: Bool = false) -> Machine {
        var machine = Machine(options: .init(waitsForConnectivity: waits, transportFollowsPath: true))
        _ = machine.handle(.path(.through("eth0")))
        #expect(machine.handle(.resume) == [.startResourceTimer, .startExchange])
        return machine
    }

    static let resumeData = Data("RCHUPLOAD...".utf8)

    @Test func aResumableUploadLeavesThePathToItsTransportAndEndsWithItsResumeData() {
        var machine = Self.uploading()
        // The path going (or moving) does not end it here: the transport stops it and makes
        // resume data, or waits and continues (waitsForConnectivity).
        #expect(machine.handle(.path(.unusable)) == [])
        #expect(machine.handle(.path(.through("wlan0"))) == [])
        #expect(machine.publicState == .running)
        #expect(machine.handle(.sent(bytes: 1 << 20, total: 4 << 20)) == [.notifySent(bytes: 1 << 20, total: 1 << 20, expected: 4 << 20)])
        var lost = Machine.Failure(code: .networkConnectionLost, description: "the network connection was lost")
        lost.uploadResumeData = Self.resumeData
        #expect(machine.handle(.exchangeFinished(lost)) == [.complete(lost)])
        #expect(machine.failure?.uploadResumeData == Self.resumeData)
    }

    @Test func cancellingAnUploadForResumeDataWaitsForTheTransportsEnd() {
        var machine = Self.uploading()
        _ = machine.handle(.sent(bytes: 1 << 20, total: 4 << 20))
        #expect(machine.handle(.cancelProducingResumeData) == [.stopExchangeForResumeData])
        #expect(machine.publicState == .running, "not completed before the resume data is known")
        #expect(machine.handle(.cancelProducingResumeData) == [], "asked twice: one stop")
        var stopped = Machine.Failure.cancelled
        stopped.uploadResumeData = Self.resumeData
        #expect(machine.handle(.exchangeFinished(stopped)) == [.deliverResumeData(Self.resumeData), .complete(stopped)])
        #expect(machine.failure?.code == .cancelled)
    }

    @Test func theResourceTimeoutStopsAnUploadForItsResumeData() {
        var machine = Self.uploading()
        _ = machine.handle(.sent(bytes: 1 << 20, total: 4 << 20))
        #expect(machine.handle(.resourceTimeoutExpired) == [.stopExchangeForResumeData], "stopped, not aborted")
        #expect(machine.publicState == .running, "not completed before the resume data is known")
        // The transport's end (the agent's -999 or -1001, or the local transport's) brings the data.
        var stopped = Machine.Failure.cancelled
        stopped.uploadResumeData = Self.resumeData
        var expired = Machine.resourceTimedOut
        expired.uploadResumeData = Self.resumeData
        #expect(machine.handle(.exchangeFinished(stopped)) == [.complete(expired)])
        // A cancel for resume data while it stops gets the data, and the task is cancelled.
        var cancelled = Self.uploading()
        _ = cancelled.handle(.resourceTimeoutExpired)
        #expect(cancelled.handle(.cancelProducingResumeData) == [], "stopping already")
        var withData = Machine.Failure.cancelled
        withData.uploadResumeData = Self.resumeData
        #expect(cancelled.handle(.exchangeFinished(stopped)) == [.deliverResumeData(Self.resumeData), .complete(withData)])
        // A plain exchange is aborted at once, as before.
        var plain = Self.exchanging()
        #expect(plain.handle(.resourceTimeoutExpired) == [.abortExchange, .complete(Machine.resourceTimedOut)])
    }

    @Test func anUploadThatCompletesWhileBeingCancelledForResumeDataCompletes() {
        var machine = Self.uploading()
        _ = machine.handle(.response(Self.head))
        _ = machine.handle(.responseAnswered(allow: true))
        #expect(machine.handle(.cancelProducingResumeData) == [.stopExchangeForResumeData])
        #expect(machine.handle(.exchangeFinished(nil)) == [.deliverResumeData(nil), .complete(nil)])
    }

    @Test func resumeDataFromATaskThatIsNotARunningResumableUploadIsNil() {
        // A plain exchange (a data task, an upload to a plain server) keeps nothing to resume.
        var plain = Self.exchanging()
        #expect(plain.handle(.cancelProducingResumeData) == [.deliverResumeData(nil), .abortExchange, .complete(.cancelled)])
        var waiting = Machine(options: .init(waitsForConnectivity: true, transportFollowsPath: true))
        _ = waiting.handle(.path(.unusable))
        _ = waiting.handle(.resume)
        #expect(waiting.handle(.cancelProducingResumeData) == [.deliverResumeData(nil), .complete(.cancelled)])
        #expect(waiting.handle(.cancelProducingResumeData) == [.deliverResumeData(nil)], "a completed task answers nil")
    }
}
