import Foundation
import ResumableDownloads
import Synchronization

/// Upload tasks from a file on upload28's resumable uploads (`DownloadAgent.upload`): the
/// server is asked which protocol it speaks (tus, the IETF draft, or neither: one plain request,
/// Foundation's behaviour). A resumable upload follows the path itself: with
/// `waitsForConnectivity` it stops when the path goes and continues from the server's offset
/// when it is back; without, the first interruption ends it with -1005 and resume data.
extension AgentExchanger {
    func startUpload(_ request: DataExchangeRequest, body: DataExchangeBody, plan: UploadPlan,
                     events: @escaping @Sendable (DataExchangeEvent) -> Void) -> any DataExchange {
        let agent = agent
        let directory = directory
        let stopper = UploadStopper()
        let task = Task {
            guard let method = HTTPMethod(request.method) else {
                return events(.finished(.init(code: .badURL, description: "the request's method \(request.method) is not an HTTP token")))
            }
            let file: URL
            switch Self.uploadFile(body, directory: directory) {
            case .success(let url): file = url
            case .failure(let failure): return events(.finished(failure))
            }
            // The file's problems as Foundation names them (a missing file, a directory, a FIFO),
            // before anything reaches the server; the agent opens it again for itself.
            switch Self.open(file) {
            case .failure(let failure): return events(.finished(failure))
            case .success(let range): range.descriptor.close()
            }
            var options = UploadOptions()
            options.method = method
            options.headerFields = request.headers.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }
            options.idleTimeout = request.timeout
            let counter = SentCounterBox()
            let handlers = Self.uploadHandlers(plan: plan, stopper: stopper, counter: counter, events: events)
            do throws(UploadFailure) {
                let result = try await agent.upload(fileAt: file.path, to: request.url, options: options,
                                                    resuming: plan.resuming, handlers: handlers)
                // The agent's own count of bytes handed to connections is the exact one.
                if let sent = counter.state.withLock({ $0.settled(result.bytesSent) }) { events(.sent(bytes: sent, total: result.length)) }
                directory.removeUploadBody(file)
                events(.response(.init(statusCode: result.response.statusCode, headers: result.response.fields, url: request.url)))
                if !result.body.isEmpty { events(.body(result.body)) }
                events(.finished(nil))
            } catch {
                // Stopped at an interruption: the task ends with that error (-1005), not "cancelled".
                var failure = DataTaskStateMachine.Failure(error.error == .cancelled ? stopper.interruption ?? error.error : error.error)
                failure.uploadResumeData = error.resumeState.flatMap { try? UploadResumeData.encoded($0, key: directory.key) }
                // A kept body stays while resume data names it.
                if failure.uploadResumeData == nil { directory.removeUploadBody(file) }
                events(.finished(failure))
            }
        }
        stopper.started(task)
        return RunningExchange(task: task)
    }

    /// The file the upload sends: the caller's, or the body kept as a file (what a drop leaves
    /// unsent goes again from there).
    private static func uploadFile(_ body: DataExchangeBody, directory: SessionDirectory) -> Result<URL, DataTaskStateMachine.Failure> {
        switch body {
        case .file(let url): return .success(url)
        case .data(let data):
            do {
                return .success(try directory.writeUploadBody(data))
            } catch {
                return .failure(.init(code: .cannotCreateFile, description:
                    "cannot keep the upload's body in \(directory.downloads.path) to send it again after a drop: \(error)",
                    underlying: .storage(SessionStorageError("\(error)"))))
            }
        }
    }

    /// Progress as the task counts it (bytes past the server's offset once resumed), and the
    /// stop at the first interruption when the task does not wait for connectivity.
    private static func uploadHandlers(plan: UploadPlan, stopper: UploadStopper, counter: SentCounterBox,
                                       events: @escaping @Sendable (DataExchangeEvent) -> Void) -> UploadHandlers {
        UploadHandlers(
            progress: { position, length in
                if let sent = counter.state.withLock({ $0.reached(position) }) { events(.sent(bytes: sent, total: length)) }
            },
            event: { event in
                switch event {
                case .resumed(let offset): counter.state.withLock { $0.position = offset }
                case .interrupted(let error) where plan.stopsAtInterruption: stopper.stop(interruptedBy: error)
                case .waitingForConnectivity where plan.stopsAtInterruption:
                    // The path went between two requests (the task began on a usable one).
                    stopper.stop(interruptedBy: .networkConnectionLost)
                default: break
                }
            })
    }
}

/// The task's `SentCounter`, shared by the upload's handlers and its end.
private final class SentCounterBox: Sendable {
    let state = Mutex(SentCounter())
}

/// Bytes really handed to connections, from the positions the upload reports (a resumed attempt
/// starts again at the server's offset, so its positions are not all new bytes).
private struct SentCounter {
    var position: Int64 = 0
    var total: Int64 = 0

    /// The new total when `position` is past the last one.
    mutating func reached(_ position: Int64) -> Int64? {
        defer { self.position = position }
        guard position > self.position else { return nil }
        total += position - self.position
        return total
    }

    /// The agent's final count, when it is higher than what the positions showed.
    mutating func settled(_ count: Int64) -> Int64? {
        guard count > total else { return nil }
        total = count
        return total
    }
}

/// Stops an upload at its first interruption, remembering why (the task's error), also when the
/// interruption comes before the task handle is known.
private final class UploadStopper: Sendable {
    private let state = Mutex<(task: Task<Void, Never>?, interruption: DownloadError?)>((nil, nil))

    var interruption: DownloadError? { state.withLock { $0.interruption } }

    func started(_ task: Task<Void, Never>) {
        let stopNow = state.withLock { state -> Bool in
            state.task = task
            return state.interruption != nil
        }
        if stopNow { task.cancel() }
    }

    func stop(interruptedBy error: DownloadError) {
        let task = state.withLock { state -> Task<Void, Never>? in
            guard state.interruption == nil else { return nil }
            state.interruption = error
            return state.task
        }
        task?.cancel()
    }
}
