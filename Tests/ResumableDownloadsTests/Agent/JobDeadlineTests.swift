import Foundation
import ReachabilityBase
import Testing
@testable import ResumableDownloads

/// A job's own time limits (issue 32 item 5) in the download state machine, on a test clock.
@Suite struct JobDeadlineTests {
    typealias M = DownloadStateMachine
    typealias T = DownloadStateMachineTests
    let start = ContinuousClock.now

    func machine(deadline: Duration? = nil, noProgress: Duration? = nil, outage: Duration? = nil) -> M {
        var options = DownloadOptions()
        options.deadline = deadline.map { Date(timeIntervalSince1970: 1_000_000 + $0.timeInterval) }
        options.noProgressTimeout = noProgress
        let policy = M.Policy(backoff: Backoff(initial: .seconds(1), maximum: .seconds(8), maximumRetryAfter: .seconds(60)),
                              maximumConsecutiveFailures: 100, maximumRestarts: 2, maximumOutageWait: outage,
                              restartStagger: .milliseconds(2), attemptRate: TokenBucket(burst: 4, interval: .milliseconds(500)))
        return M(policy: policy.limitingTime(of: options, now: start, wallClock: Date(timeIntervalSince1970: 1_000_000)))
    }

    @Test func theDeadlineEndsARunningTransferAndKeepsItsResumeData() {
        var m = machine(deadline: .seconds(3600))
        let first = m.handle(.start(T.half, T.usable), now: start)
        #expect(T.timers(first).contains { $0.0.kind == .deadline && $0.1 == start + .seconds(3600) })
        #expect(T.starts(first).count == 1)
        // Bytes flowing do not move it (it counts from the add, not from the last byte).
        #expect(m.handle(.bytesArrived(attempt: 1), now: start + .seconds(100)).isEmpty)
        guard let timer = T.timers(first).first(where: { $0.0.kind == .deadline })?.0 else { Issue.record("\(first)"); return }
        #expect(m.handle(.timerFired(timer), now: start + .seconds(3600)) == [.abortAttempt(.recovery)])
        let ended = m.handle(.attemptEnded(attempt: 1, .aborted(.recovery), file: T.half), now: start + .seconds(3600))
        guard case .failed(let error)? = T.exits(ended).first else { Issue.record("\(ended)"); return }
        #expect(error.urlErrorCode == .timedOut && error.isResumable, "the record and bytes stay: \(error)")
        #expect(error.description.contains("deadline passed"))
    }

    @Test func aJobPastItsDeadlineDoesNotStart() {
        var m = machine(deadline: .zero)
        let actions = m.handle(.start(T.half, T.usable), now: start)
        #expect(T.starts(actions).isEmpty)
        #expect(T.exits(actions).count == 1)
    }

    @Test func theDeadlineAlsoEndsAWaitForThePath() {
        var m = machine(deadline: .seconds(10))
        let first = m.handle(.start(T.half, T.offline), now: start)
        guard let timer = T.timers(first).first(where: { $0.0.kind == .deadline })?.0 else { Issue.record("\(first)"); return }
        #expect(T.exits(m.handle(.timerFired(timer), now: start + .seconds(10))).count == 1)
    }

    @Test func noProgressCountsFromTheFirstErrorAndEachByteResetsIt() {
        var m = machine(noProgress: .seconds(30), outage: .seconds(600))
        #expect(T.timers(m.handle(.start(T.half, T.usable), now: start)).isEmpty, "nothing went wrong yet")
        let failed = m.handle(.attemptEnded(attempt: 1, .transport(T.refused), file: T.half), now: start + .seconds(5))
        #expect(T.timers(failed).contains { $0.0.kind == .outage && $0.1 == start + .seconds(35) }, "the shorter of the two bounds")
        // The server is probed and answers: bytes stop the clock; a later error starts a new one.
        _ = m.handle(.probeGranted(connectTimeout: .milliseconds(500)), now: start + .seconds(6))
        guard let attempt = m.runningAttempt else { Issue.record("no probe started"); return }
        #expect(m.handle(.bytesArrived(attempt: attempt), now: start + .seconds(7)) == [.cancelTimer(.outage)])
        let again = m.handle(.attemptEnded(attempt: attempt, .transport(T.refused), file: T.half), now: start + .seconds(20))
        guard let timer = T.timers(again).first(where: { $0.0.kind == .outage }) else { Issue.record("\(again)"); return }
        #expect(timer.1 == start + .seconds(50))
        var actions = m.handle(.timerFired(timer.0), now: start + .seconds(50))
        if actions == [.abortAttempt(.recovery)] {
            actions = m.handle(.attemptEnded(attempt: m.runningAttempt ?? -1, .aborted(.recovery), file: T.half), now: start + .seconds(50))
        }
        guard case .failed(let error)? = T.exits(actions).first else { Issue.record("\(actions)"); return }
        #expect(error.isResumable && error.urlErrorCode == .timedOut)
        #expect(error.description.contains("no progress for 30 s"), "\(error)")
    }

    /// A job waiting in line fails at its deadline, not when its turn comes: the agent looks at
    /// the waiting ones' deadlines after each scheduling pass and arms one timer for the next.
    @Test func aQueuedJobIsDueAtItsDeadlineAndTheTimerAimsAtTheNextOne() {
        let t0 = Date(timeIntervalSince1970: 1_000_000)
        let (early, late, running, none) = (UUID(), UUID(), UUID(), UUID())
        var watch = QueuedDeadlineWatch()
        watch.track(early, deadline: t0.addingTimeInterval(10))
        watch.track(late, deadline: t0.addingTimeInterval(60))
        watch.track(running, deadline: t0.addingTimeInterval(5))   // holds a slot: its machine's own timer
        watch.track(none, deadline: nil)
        let waiting: (UUID) -> Bool = { $0 != running }
        let before = watch.check(now: t0, isWaiting: waiting)
        #expect(before.due.isEmpty && before.next == t0.addingTimeInterval(10))
        // At the instant (the timer fires then), not a moment later.
        let atDeadline = watch.check(now: t0.addingTimeInterval(10), isWaiting: waiting)
        #expect(atDeadline.due == [early] && atDeadline.next == t0.addingTimeInterval(60))
        // Once failed it waits no more; a clock past both deadlines finds the other, nothing next.
        let after = watch.check(now: t0.addingTimeInterval(61)) { waiting($0) && $0 != early }
        #expect(after.due == [late] && after.next == nil)
        watch.prune { $0 != late }
        #expect(Set(watch.deadlines.keys) == [early, running])
    }
}
