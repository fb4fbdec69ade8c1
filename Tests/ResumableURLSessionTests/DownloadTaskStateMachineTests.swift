import Foundation
import ResumableDownloads
import Testing
@testable import ResumableURLSession

/// The task's decisions, without sockets: inputs in, actions out.
@Suite("Download task state machine")
struct DownloadTaskStateMachineTests {
    typealias Machine = DownloadTaskStateMachine
    static let file = URL(fileURLWithPath: "/state/downloads/x.download")
    static let blob = Data("blob".utf8)

    static func running(waits: Bool = false, resumeData: Data? = nil, stored: Int64 = 0) -> Machine {
        var machine = Machine(options: .init(waitsForConnectivity: waits, originalResumeData: resumeData),
                              storedBytes: stored, expectedBytes: resumeData == nil ? nil : 1000)
        #expect(machine.publicState == .suspended)
        #expect(machine.handle(.resume) == [.start])
        #expect(machine.publicState == .running)
        return machine
    }

    @Test func aFreshDownloadReportsMonotonicProgressThenTheFile() {
        var machine = Self.running()
        #expect(machine.handle(.progress(bytesReceived: 0, totalBytes: nil)) == [], "before the first attempt")
        #expect(machine.handle(.event(.started)) == [])
        #expect(machine.handle(.progress(bytesReceived: 100, totalBytes: 1000))
                == [.notifyWrote(bytes: 100, total: 100, expected: 1000)])
        #expect(machine.handle(.progress(bytesReceived: 100, totalBytes: 1000)) == [], "no repeat")
        #expect(machine.handle(.progress(bytesReceived: 90, totalBytes: 1000)) == [], "never backwards")
        #expect(machine.handle(.progress(bytesReceived: 600, totalBytes: 1000))
                == [.notifyWrote(bytes: 500, total: 600, expected: 1000)])
        // The completion tops progress up to the length before handing over the file.
        #expect(machine.handle(.event(.completed(Self.file)))
                == [.notifyWrote(bytes: 400, total: 1000, expected: 1000), .deliverFile(Self.file)])
        #expect(machine.publicState == .running)
        #expect(machine.handle(.fileDelivered) == [.complete(nil), .release(keepFiles: false)])
        #expect(machine.publicState == .completed)
        #expect(machine.failure == nil)
    }

    @Test func aPathLostMidTransferIsNetworkConnectionLostWithResumeData() {
        var machine = Self.running()
        _ = machine.handle(.event(.started))
        _ = machine.handle(.progress(bytesReceived: 300, totalBytes: 1000))
        #expect(machine.handle(.waitingForConnectivity(reason: nil)) == [.stopTransfer])
        #expect(machine.publicState == .running, "still running until the delegate is told")
        #expect(machine.handle(.progress(bytesReceived: 350, totalBytes: 1000))
                == [.notifyWrote(bytes: 50, total: 350, expected: 1000)], "bytes in flight still count")
        let actions = machine.handle(.stopped(.paused(resumeData: Self.blob)))
        guard case .complete(let completion?) = actions.first else { Issue.record("\(actions)"); return }
        #expect(completion.failure.code == .networkConnectionLost)
        #expect(completion.resumeData == Self.blob)
        #expect(actions.last == .release(keepFiles: true))
        #expect(machine.publicState == .completed)
    }

    @Test func noPathBeforeTheFirstAttemptIsNotConnectedToInternet() {
        var machine = Self.running()
        #expect(machine.handle(.waitingForConnectivity(reason: .expensive)) == [.startConnectivityGrace])
        #expect(machine.handle(.waitingForConnectivity(reason: .expensive)) == [], "one grace at a time")
        #expect(machine.handle(.connectivityGraceExpired) == [.stopTransfer])
        let actions = machine.handle(.stopped(.paused(resumeData: nil)))
        guard case .complete(let completion?) = actions.first else { Issue.record("\(actions)"); return }
        #expect(completion.failure.code == .notConnectedToInternet)
        #expect(completion.failure.networkUnavailableReason == .expensive)
        #expect(completion.resumeData == nil)
        #expect(actions.last == .release(keepFiles: false), "nothing to resume: no debris")
    }

    @Test func aPathArrivingWithinTheGraceLetsTheTaskRun() {
        var machine = Self.running()
        #expect(machine.handle(.waitingForConnectivity(reason: nil)) == [.startConnectivityGrace])
        #expect(machine.handle(.event(.started)) == [])
        #expect(machine.handle(.connectivityGraceExpired) == [])
        #expect(machine.publicState == .running)
        #expect(machine.handle(.waitingForConnectivity(reason: nil)) == [.stopTransfer], "later: the connection was lost")
    }

    @Test func aRetryEndsTheTaskUnlessItWaitsForConnectivity() {
        var strict = Self.running()
        _ = strict.handle(.event(.started))
        #expect(strict.handle(.event(.retrying(after: .zero, error: .networkConnectionLost))) == [.stopTransfer])

        var patient = Self.running(waits: true)
        _ = patient.handle(.event(.started))
        #expect(patient.handle(.event(.retrying(after: .zero, error: .networkConnectionLost))) == [])
        #expect(patient.handle(.waitingForConnectivity(reason: nil)) == [.notifyWaitingForConnectivity])
        #expect(patient.handle(.waitingForConnectivity(reason: nil)) == [], "announced once per task")
        #expect(patient.handle(.event(.resumed(at: 0))) == [])
        #expect(patient.publicState == .running)
    }

    @Test func aResumedTaskAnnouncesItsOffsetBeforeTheFirstWrite() {
        var machine = Self.running(resumeData: Self.blob, stored: 400)
        #expect(machine.bytesWritten == 400)
        // The engine's first report is the stored bytes: no write yet.
        #expect(machine.handle(.progress(bytesReceived: 400, totalBytes: 1000)) == [])
        #expect(machine.handle(.event(.resumed(at: 400))) == [])
        #expect(machine.handle(.progress(bytesReceived: 450, totalBytes: 1000))
                == [.notifyResumed(offset: 400, expectedTotal: 1000), .notifyWrote(bytes: 50, total: 450, expected: 1000)])
        #expect(machine.handle(.progress(bytesReceived: 500, totalBytes: 1000))
                == [.notifyWrote(bytes: 50, total: 500, expected: 1000)])
    }

    @Test func aResumeAnsweredWithTheWholeResourceStartsOverAtZero() {
        var machine = Self.running(resumeData: Self.blob, stored: 400)
        _ = machine.handle(.event(.resumed(at: 400)))
        #expect(machine.handle(.event(.restartedFromZero(reason: "changed"))) == [])
        #expect(machine.handle(.progress(bytesReceived: 80, totalBytes: 1200))
                == [.notifyResumed(offset: 0, expectedTotal: 1200), .notifyWrote(bytes: 80, total: 80, expected: 1200)])
    }

    @Test func resumeDataWhosePartialFileIsGoneRestartsAtZero() {
        var machine = Self.running(resumeData: Self.blob, stored: 400)
        #expect(machine.handle(.event(.started)) == [])
        #expect(machine.handle(.progress(bytesReceived: 10, totalBytes: 1000))
                == [.notifyResumed(offset: 0, expectedTotal: 1000), .notifyWrote(bytes: 10, total: 10, expected: 1000)])
    }

    @Test func cancelByProducingResumeData() {
        var machine = Self.running()
        _ = machine.handle(.event(.started))
        _ = machine.handle(.progress(bytesReceived: 300, totalBytes: 1000))
        #expect(machine.handle(.cancelByProducingResumeData) == [.stopTransfer])
        #expect(machine.publicState == .canceling)
        #expect(machine.handle(.cancelByProducingResumeData) == [], "a second request waits for the same answer")
        #expect(machine.handle(.cancel) == [])
        #expect(machine.handle(.event(.paused)) == [])
        let actions = machine.handle(.stopped(.paused(resumeData: Self.blob)))
        #expect(actions.first == .answerResumeData(Self.blob))
        guard case .complete(let completion?) = actions.dropFirst().first else { Issue.record("\(actions)"); return }
        #expect(completion.failure.code == .cancelled && completion.resumeData == Self.blob)
        #expect(actions.last == .release(keepFiles: true))
        #expect(machine.handle(.cancelByProducingResumeData) == [.answerResumeData(nil)], "after completion: nil")
    }

    @Test func cancelBeforeStartHandsBackTheOriginalResumeData() {
        var machine = Machine(options: .init(waitsForConnectivity: false, originalResumeData: Self.blob))
        let actions = machine.handle(.cancelByProducingResumeData)
        #expect(actions.first == .answerResumeData(Self.blob))
        #expect(actions.last == .release(keepFiles: true))
        #expect(machine.handle(.resume) == [], "a completed task does not start")
    }

    @Test func cancelDeletesAndReportsCancelled() {
        var machine = Self.running()
        _ = machine.handle(.event(.started))
        #expect(machine.handle(.cancel) == [.cancelTransfer])
        #expect(machine.publicState == .canceling)
        #expect(machine.handle(.progress(bytesReceived: 50, totalBytes: 100)) == [], "no writes after cancel")
        let actions = machine.handle(.event(.failed(.cancelled)))
        guard case .complete(let completion?) = actions.first else { Issue.record("\(actions)"); return }
        #expect(completion.failure.code == .cancelled && completion.resumeData == nil)
        #expect(actions.last == .release(keepFiles: false))
    }

    @Test func suspendAndResumeDriveTheEngine() {
        var machine = Self.running()
        #expect(machine.handle(.suspend) == [.pauseTransfer])
        #expect(machine.publicState == .suspended)
        #expect(machine.handle(.event(.paused)) == [])
        #expect(machine.handle(.waitingForConnectivity(reason: nil)) == [], "a suspended task does not fail")
        #expect(machine.handle(.resume) == [.resumeTransfer])
        #expect(machine.handle(.resume) == [])
    }

    @Test func failuresMapToURLErrorCodes() {
        var notFound = Self.running()
        _ = notFound.handle(.event(.started))
        let actions = notFound.handle(.event(.failed(DownloadError.httpStatus)))
        guard case .complete(let completion?) = actions.first else { Issue.record("\(actions)"); return }
        #expect(completion.failure.code == DownloadError.httpStatus.urlErrorCode)
        #expect(actions.last == .release(keepFiles: false))

        var outage = Self.running(waits: true)
        _ = outage.handle(.event(.started))
        #expect(outage.handle(.event(.failed(.connectivityTimeout))) == [.stopTransfer], "resumable: make resume data")
        let ended = outage.handle(.stopped(.paused(resumeData: Self.blob)))
        guard case .complete(let timedOut?) = ended.first else { Issue.record("\(ended)"); return }
        #expect(timedOut.failure.code == .timedOut && timedOut.resumeData == Self.blob)
    }

    @Test func aStopThatFindsTheDownloadFinishedDeliversTheFile() {
        var machine = Self.running()
        _ = machine.handle(.event(.started))
        _ = machine.handle(.cancelByProducingResumeData)
        #expect(machine.handle(.event(.completed(Self.file))) == [], "the stop reports it")
        #expect(machine.handle(.stopped(.finished(Self.file))) == [.answerResumeData(nil), .deliverFile(Self.file)])
    }

    @Test func aStartFailureKeepsTheFilesItDoesNotOwn() {
        var machine = Self.running(resumeData: Self.blob, stored: 10)
        let failure = Machine.Failure(code: .cannotWriteToFile, description: "stale", underlying: .resumeData(.stale))
        let actions = machine.handle(.startFailed(failure))
        #expect(actions == [.complete(.init(failure: failure, resumeData: nil)), .release(keepFiles: true)])
    }
}
