import Foundation
import LinuxSystem
import ReachabilityAgent
import ResumableDownloads

/// Data tasks' exchanges on the session's engine: `DownloadAgent.exchange`, the engine's
/// one-shot HTTP exchange on its libcurl multi. The task's state machine decides when to start
/// and stop one; the agent also ends one whose path moves, which the task hears as -1005.
struct AgentExchanger: DataExchanger {
    let agent: DownloadAgent
    /// The session's directory: its key signs upload resume data, and it keeps the bodies of
    /// resumable uploads from `Data`.
    let directory: SessionDirectory

    /// File uploads run on `DownloadAgent.upload` (AgentExchanger+Uploads).
    var runsResumableUploads: Bool { true }

    func start(_ request: DataExchangeRequest, events: @escaping @Sendable (DataExchangeEvent) -> Void) -> any DataExchange {
        if let plan = request.upload, let body = request.body {
            return startUpload(request, body: body, plan: plan, events: events)
        }
        let agent = agent
        let task = Task {
            var opened: FileDescriptor?
            defer { opened?.close() }
            // ResumableDataTask.check let only tokens through.
            guard let method = HTTPMethod(request.method) else {
                return events(.finished(.init(code: .badURL, description: "the request's method \(request.method) is not an HTTP token")))
            }
            do throws(DownloadError) {
                let handlers = ExchangeHandlers(
                    response: { head in
                        events(.response(.init(statusCode: head.statusCode, headers: head.fields, url: request.url)))
                    },
                    bodyData: { events(.body($0)) },
                    bytesSent: { sent, expected in events(.sent(bytes: sent, total: expected)) })
                // The task waits for paths itself (DataTaskStateMachine); waiting here too only
                // covers the moment the agent hears of a path the task already saw.
                let body: ExchangeBody
                switch request.body {
                case nil: body = .empty
                case .data(let data): body = .data(data)
                case .file(let url):
                    let range: ExchangeFileRange
                    switch Self.open(url) {
                    case .failure(let failure): return events(.finished(failure))
                    case .success(let opened): range = opened
                    }
                    opened = range.descriptor
                    body = .file(range)
                }
                _ = try await agent.exchange(Self.exchangeRequest(request, method: method, body: body), waitsForConnectivity: true, handlers: handlers)
                events(.finished(nil))
            } catch {
                events(.finished(.init(error)))
            }
        }
        return RunningExchange(task: task)
    }

    static func exchangeRequest(_ request: DataExchangeRequest, method: HTTPMethod, body: ExchangeBody) -> ExchangeRequest {
        return ExchangeRequest(method: method, url: request.url,
                               headerFields: request.headers.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" },
                               body: body, idleTimeout: request.timeout, responseBodyLimit: .max)
    }

    /// The upload's file, open: a regular file this process may read, whole, with its identity so
    /// the engine notices a change before the last byte goes. Never waits for a FIFO's writer.
    static func open(_ url: URL) -> Result<ExchangeFileRange, DataTaskStateMachine.Failure> {
        UploadSourceFile.open(url.path)
            .map { ExchangeFileRange(descriptor: $0.descriptor, offset: 0, length: $0.status.size, identity: $0.status) }
            .mapError(DataTaskStateMachine.Failure.init)
    }

    /// Cancelling the Swift task aborts the engine's transfer (the agent's cancellation handler).
    struct RunningExchange: DataExchange {
        let task: Task<Void, Never>
        func cancel() { task.cancel() }
    }
}

extension DataTaskStateMachine.Failure {
    /// A file an upload task cannot send, as Foundation names it (a missing file, a directory,
    /// one this process may not read, or not a regular file: a FIFO, a device).
    init(_ problem: UploadSourceFile.Problem) {
        let code: URLError.Code = switch problem.kind {
        case .missing: .fileDoesNotExist
        case .directory: .fileIsDirectory
        case .unreadable, .notRegular: .noPermissionsToReadFile
        case .other: .cannotOpenFile
        }
        self.init(code: code, description: "the upload's file: \(problem.message)")
    }
}
