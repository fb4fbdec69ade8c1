import Foundation
import ReachabilityAgent
import Testing
@testable import ResumableURLSession

/// A background task's mirror, without an agent or sockets: inputs in, actions out.
@Suite("Background task state machine")
struct BackgroundTaskStateMachineTests {
    typealias Machine = BackgroundTaskStateMachine

    @Test func commandsAreSentOnceAndOnlyFromTheirStates() {
        var machine = Machine(isFromResumeData: false)
        #expect(machine.publicState == .suspended)
        #expect(machine.handle(.suspend) == [], "already suspended")
        #expect(machine.handle(.resume) == [.send(.resume)])
        #expect(machine.handle(.resume) == [], "already running")
        #expect(machine.handle(.suspend) == [.send(.suspend)])
        #expect(machine.handle(.cancel(producingResumeData: true)) == [.send(.cancelProducingResumeData)])
        #expect(machine.publicState == .canceling)
        #expect(machine.handle(.cancel(producingResumeData: false)) == [], "a second cancel waits for the first")
        // The agent's snapshot does not undo a cancel in flight.
        #expect(machine.handle(.snapshot(.running, bytes: 10, total: 100)) == [])
        #expect(machine.publicState == .canceling && machine.bytesReceived == 10 && machine.expectedBytes == 100)
        #expect(machine.handle(.failed) == [])
        #expect(machine.publicState == .completed && !machine.isLive)
        // Resume data asked of a task that is over: nil, at once.
        #expect(machine.handle(.cancel(producingResumeData: true)) == [.answerResumeDataWithNothing])
        #expect(machine.handle(.cancel(producingResumeData: false)) == [])
        #expect(machine.handle(.resume) == [])
    }

    @Test func progressIsMonotonicAndTopsUpAtTheEnd() {
        var machine = Machine(isFromResumeData: false)
        _ = machine.handle(.resume)
        #expect(machine.handle(.progressed(bytes: 100, total: 1000)) == [.notifyWrote(bytes: 100, total: 100, expected: 1000)])
        #expect(machine.handle(.progressed(bytes: 100, total: nil)) == [], "no repeat")
        #expect(machine.handle(.progressed(bytes: 400, total: nil)) == [.notifyWrote(bytes: 300, total: 400, expected: 1000)])
        // Fewer bytes survived (an agent restart lost the tail): counting restarts there.
        #expect(machine.handle(.progressed(bytes: 250, total: nil)) == [.notifyResumed(offset: 250, expected: 1000)])
        #expect(machine.handle(.progressed(bytes: 300, total: nil)) == [.notifyWrote(bytes: 50, total: 300, expected: 1000)])
        #expect(machine.handle(.waitingForConnectivity) == [.notifyWaitingForConnectivity])
        #expect(machine.handle(.waitingForConnectivity) == [], "said once")
        #expect(machine.handle(.finished(total: 1000)) == [.notifyWrote(bytes: 700, total: 1000, expected: 1000)])
        #expect(machine.publicState == .completed && machine.bytesReceived == 1000)
        #expect(machine.handle(.progressed(bytes: 1000, total: nil)) == [], "nothing after the end")
    }

    @Test func aTaskFromResumeDataAnnouncesItsOffsetFirst() {
        var machine = Machine(isFromResumeData: true)
        _ = machine.handle(.resume)
        #expect(machine.handle(.resumed(offset: 6000, total: 16000)) == [.notifyResumed(offset: 6000, expected: 16000)])
        #expect(machine.handle(.resumed(offset: 6000, total: nil)) == [], "once")
        #expect(machine.handle(.progressed(bytes: 7000, total: nil)) == [.notifyWrote(bytes: 1000, total: 7000, expected: 16000)])
        // A task from resume data whose first news is progress announces that as its offset.
        var other = Machine(isFromResumeData: true)
        _ = other.handle(.resume)
        #expect(other.handle(.progressed(bytes: 5000, total: 9000)) == [.notifyResumed(offset: 5000, expected: 9000)])
        // The resource changed: the agent restarted at zero, which is announced too.
        #expect(other.handle(.resumed(offset: 0, total: 9000)) == [.notifyResumed(offset: 0, expected: 9000)])
    }

    @Test func aFinishedTaskWithoutProgressHasNothingToTopUp() {
        var machine = Machine(isFromResumeData: false)
        _ = machine.handle(.resume)
        #expect(machine.handle(.finished(total: 64)) == [])
        #expect(machine.bytesReceived == 64 && machine.expectedBytes == 64)
    }
}
