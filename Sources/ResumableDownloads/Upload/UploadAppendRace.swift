import FoundationEssentials
import ReachabilityBase
import Synchronization

/// An append (a `PATCH`, or the draft's creation request once its `104` named the upload) that
/// goes silent while the path stays up is raced, as downloads race a silent transfer: a fresh
/// connection asks the server's offset (`HEAD`) in the host's race turn. A racer that cannot
/// connect shows the server gone on this path, so the append ends at once and the upload waits
/// for the host's probes, instead of sitting out the idle timeout (5 s) over a blackhole; a
/// racer that gets the offset takes over from it (the silent connection is given up). A racer
/// that connects but learns nothing leaves the append to its idle timeout.
enum UploadAppendRace {
    /// What the race decided.
    enum Verdict: Sendable {
        /// Nothing: the append ended by itself, or the racer learned nothing.
        case none
        /// No fresh connection reached the server (`racer` when one was tried; nil when the
        /// host's turn was refused, another transfer having just found the server gone).
        case serverGone(racer: ExchangeOutcome?)
        /// The server answered its offset while the append was silent.
        case takeOver(ResponseHead, racer: ExchangeOutcome)
    }

    /// How long an append may be silent before it is raced at the least, and how long the
    /// racer's offset question may wait for an answer.
    static let minimumSilence: Duration = .seconds(1)
    static let answerTimeout: Duration = .seconds(2)

    /// Whether an append of `plan` is worth racing: it carries a body to a resumable upload, and
    /// its idle timeout is not much longer than the race would take anyway.
    static func isRaced(_ plan: UploadStateMachine.Request, protocol used: UploadProtocol, idleTimeout: Duration) -> Bool {
        (plan.bodyLength ?? 1) > 0 && plan.bodyOffset != nil && (used == .ietf || used == .tus)
            && idleTimeout >= minimumSilence * 2
    }

    /// The offset question the upload would ask after its append failed now, with `interim`
    /// heads seen so far (a `104`'s upload resource): a copy of `machine` is asked, so the
    /// racer's request is exactly the machine's next.
    static func offsetQuestion(_ machine: UploadStateMachine, interim: [ResponseHead]) -> UploadStateMachine.Request? {
        var copy = machine
        _ = copy.event(.failed(.networkConnectionLost, interim: interim, bytesSent: 0))
        guard case .send(let plan) = copy.event(.retry), plan.method == .head else { return nil }
        return plan
    }
}

/// When an append's bytes last went out, and so when its silence becomes suspect: the
/// downloads' `StallDetector` (it learns the pace, so a slow reader's gaps are not suspected).
final class AppendSilence: Sendable {
    private let detector: Mutex<StallDetector>

    init(maximum: Duration) {
        detector = Mutex(StallDetector(minimum: UploadAppendRace.minimumSilence,
                                       maximum: max(maximum, UploadAppendRace.minimumSilence), now: .now))
    }

    /// Body bytes were handed to the connection.
    func progressed() { detector.withLock { $0.bytesArrived(at: .now) } }

    /// When the append is suspected if nothing more goes out.
    var deadline: ContinuousClock.Instant { detector.withLock { $0.deadline } }
}

extension DownloadAgent {
    /// Runs the append `request` while racing its silence; the append's outcome (ended early
    /// when the race decided) and the verdict.
    func raceSilentAppend(_ request: ExchangeRequest, machine: UploadStateMachine, wait: UploadServerWait,
                          waitsForConnectivity: Bool, handlers: ExchangeHandlers, silence: AppendSilence,
                          interim: @escaping @Sendable () -> [ResponseHead]) async -> (Result<ExchangeOutcome, DownloadError>, UploadAppendRace.Verdict) {
        enum Finished: Sendable {
            case append(Result<ExchangeOutcome, DownloadError>)
            case racer(UploadAppendRace.Verdict)
        }
        return await withTaskGroup(of: Finished.self) { group in
            group.addTask {
                do throws(DownloadError) {
                    return .append(.success(try await self.exchangeReport(request, waitsForConnectivity: waitsForConnectivity,
                                                                           handlers: handlers)))
                } catch {
                    return .append(.failure(error))
                }
            }
            group.addTask {
                .racer(await self.appendRacer(machine: machine, wait: wait, silence: silence, interim: interim))
            }
            var appended: Result<ExchangeOutcome, DownloadError>?
            var verdict = UploadAppendRace.Verdict.none
            while let finished = await group.next() {
                switch finished {
                case .append(let result):
                    appended = result
                    group.cancelAll()   // the racer is called off
                case .racer(let decided):
                    if case .none = decided { continue }
                    guard appended == nil else { continue }
                    verdict = decided
                    group.cancelAll()   // the silent append is given up
                }
            }
            return (appended ?? .failure(.cancelled), verdict)
        }
    }

    /// Waits until the append is silent for its suspicion, then asks the server's offset on a
    /// fresh connection in the host's race turn.
    private func appendRacer(machine: UploadStateMachine, wait: UploadServerWait, silence: AppendSilence,
                             interim: @Sendable () -> [ResponseHead]) async -> UploadAppendRace.Verdict {
        while ContinuousClock.now < silence.deadline {
            do { try await Task.sleep(until: silence.deadline, clock: .continuous) } catch { return .none }
        }
        guard let plan = UploadAppendRace.offsetQuestion(machine, interim: interim()) else { return .none }
        configuration.logger.debug("upload append silent: asking for a race turn", metadata: ["host": wait.host])
        guard let granted = await wait.raceTurn() else { return .none }
        guard granted else {
            configuration.logger.debug("upload race turn refused: the server is gone on this path")
            return .serverGone(racer: nil)
        }
        var question = ExchangeRequest(method: .head, url: plan.url, headerFields: plan.headerFields, body: .empty,
                                       idleTimeout: UploadAppendRace.answerTimeout)
        question.freshConnection = true
        // At most a second: the server took this upload's bytes a moment ago, so a fresh
        // connection to it is answered within its round trip (the host's own figure is 2 s
        // until an exchange has ended and shown its connect time, which a long append has not).
        question.connectTimeout = min(wait.connectTimeout, .seconds(1))
        let outcome: ExchangeOutcome
        do { outcome = try await exchangeReport(question) } catch {
            wait.finishRace(reachable: nil)
            return .none
        }
        configuration.logger.debug("upload racer ended", metadata: [
            "result": outcome.result.traced, "connected": outcome.didConnect ? "yes" : "no",
            "connect-timeout": "\(question.connectTimeout.map { "\($0)" } ?? "-")"])
        if Task.isCancelled {
            wait.finishRace(reachable: outcome.didConnect ? true : nil)
            return .none
        }
        if !outcome.didConnect {
            let failure: DownloadError? = if case .failure(let error) = outcome.result { error } else { nil }
            let isGone = failure.map { RetryClass($0.urlCode) == .connectionLevel } ?? false
            wait.finishRace(reachable: isGone ? false : nil)
            return isGone ? .serverGone(racer: outcome) : .none
        }
        wait.finishRace(reachable: true)
        if case .success(let response) = outcome.result, (200..<300).contains(response.head.statusCode),
           response.head["upload-offset"] != nil {
            return .takeOver(response.head, racer: outcome)
        }
        return .none
    }
}
