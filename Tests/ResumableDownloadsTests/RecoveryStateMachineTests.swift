import Foundation
import Testing
@testable import ResumableDownloads

@Suite("Recovery after an attempt")
struct RecoveryStateMachineTests {
    func machine(maxFailures: Int = 3) -> RecoveryStateMachine {
        RecoveryStateMachine(policy: .init(backoff: Backoff(initial: .seconds(1), maximum: .seconds(8),
                                                            maximumRetryAfter: .seconds(60)),
                                           maximumConsecutiveFailures: maxFailures, maximumRestarts: 2))
    }

    func ended(_ result: AttemptResult, bytes: Bool = false, satisfied: Bool = true) -> RecoveryStateMachine.Event {
        .attemptEnded(result, receivedBytes: bytes, isPathSatisfied: satisfied)
    }

    @Test func connectionLostRetriesAtOnceThenBacksOff() {
        var m = machine()
        #expect(m.event(ended(.transport(.networkConnectionLost)), jitter: 1)
                == .retry(after: .zero, freshConnection: true, error: .networkConnectionLost))
        #expect(m.event(ended(.transport(.networkConnectionLost)), jitter: 1)
                == .retry(after: .seconds(1), freshConnection: true, error: .networkConnectionLost))
        #expect(m.event(ended(.transport(.networkConnectionLost)), jitter: 1)
                == .retry(after: .seconds(2), freshConnection: true, error: .networkConnectionLost))
        guard case .fail(let error) = m.event(ended(.transport(.networkConnectionLost)), jitter: 1) else {
            Issue.record("budget should be spent"); return
        }
        #expect(error == .networkConnectionLost)
    }

    @Test func progressResetsTheBudget() {
        var m = machine(maxFailures: 1)
        _ = m.event(ended(.transport(.networkConnectionLost)), jitter: 1)
        #expect(m.event(ended(.transport(.networkConnectionLost), bytes: true), jitter: 1)
                == .retry(after: .zero, freshConnection: true, error: .networkConnectionLost))
        #expect(m.consecutiveFailures == 1)
    }

    @Test func noPathMeansWaitWithoutSpendingBudget() {
        var m = machine(maxFailures: 1)
        for _ in 0..<10 {
            #expect(m.event(ended(.transport(.notConnectedToInternet), satisfied: false), jitter: 1) == .waitForPath)
            #expect(m.event(ended(.transport(.cannotConnectToHost), satisfied: false), jitter: 1) == .waitForPath)
            #expect(m.event(ended(.aborted(.pathChanged)), jitter: 1) == .waitForPath)
        }
        #expect(m.consecutiveFailures == 0)
    }

    @Test func serverBusyHonoursRetryAfter() {
        var m = machine()
        #expect(m.event(ended(.serverBusy(status: 503, retryAfter: .seconds(5))), jitter: 0)
                == .retry(after: .seconds(5), freshConnection: false, error: .httpStatus(503)))
        #expect(m.event(ended(.serverBusy(status: 503, retryAfter: nil)), jitter: 0)
                == .retry(after: .seconds(1), freshConnection: false, error: .httpStatus(503)))
    }

    @Test func unreachableBacksOffFromTheFirstFailure() {
        var m = machine()
        #expect(m.event(ended(.transport(.cannotConnectToHost)), jitter: 1)
                == .retry(after: .seconds(1), freshConnection: true, error: .cannotConnectToHost))
    }

    @Test func restartsAreBounded() {
        var m = machine()
        #expect(m.event(ended(.restartFromZero(reason: "x")), jitter: 1) == .restartFromZero(reason: "x"))
        #expect(m.event(ended(.restartFromZero(reason: "x")), jitter: 1) == .restartFromZero(reason: "x"))
        #expect(m.event(ended(.restartFromZero(reason: "x")), jitter: 1) == .fail(.badServerResponse))
    }

    @Test func terminalResults() {
        var m = machine()
        #expect(m.event(ended(.completed(totalLength: 5)), jitter: 1) == .complete(totalLength: 5))
        #expect(m.event(ended(.incomplete(offset: 5), bytes: true), jitter: 1) == .continueNow)
        #expect(m.event(ended(.failed(.httpStatus(404))), jitter: 1) == .fail(.httpStatus))
        #expect(m.event(ended(.transport(.httpStatus)), jitter: 1) == .fail(.httpStatus))
        #expect(m.event(ended(.aborted(.writeFailed(.diskFull))), jitter: 1) == .fail(.diskFull))
        #expect(m.event(ended(.aborted(.paused)), jitter: 1) == .stop(.paused))
        #expect(m.event(ended(.aborted(.cancelled)), jitter: 1) == .stop(.cancelled))
    }
}
