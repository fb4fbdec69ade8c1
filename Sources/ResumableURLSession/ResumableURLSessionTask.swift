import Foundation
import FoundationNetworking
import ResumableDownloads

/// What every task of a `ResumableURLSession` is, as `URLSessionTask` is for Foundation's
/// tasks: an identity (a handle equal only to itself), the request it was made for, its state,
/// and a way to stop it producing resume data. `ResumableDownloadTask` and `ResumableDataTask`
/// conform; the members they share are written once here.
public protocol ResumableURLSessionTask: AnyObject, Sendable, Hashable, CustomStringConvertible {
    /// Unique within its session.
    var taskIdentifier: Int { get }
    /// What the task was created for.
    var originalRequest: URLRequest? { get }
    /// running, suspended, canceling or completed.
    var state: ResumableDownloadTask.State { get }
    /// Stops the task and hands `completionHandler` what continues it, or nil.
    func cancel(byProducingResumeData completionHandler: @escaping @Sendable (Data?) -> Void)
}

extension ResumableURLSessionTask {
    /// The same as `originalRequest` (redirects are followed inside the engine).
    public var currentRequest: URLRequest? { originalRequest }

    /// `cancel(byProducingResumeData:)` as an async call: the resume data, or nil.
    public func cancelByProducingResumeData() async -> Data? {
        await withCheckedContinuation { continuation in
            cancel { continuation.resume(returning: $0) }
        }
    }

    /// The type, identifier, URL (credentials and query redacted) and state.
    public var description: String {
        "\(Self.self)(\(taskIdentifier) \(originalRequest?.url.map { URLRedaction.redacted($0) } ?? "-") \(state))"
    }

    /// Identity: two handles are equal only when they are the same object.
    public static func == (lhs: Self, rhs: Self) -> Bool { lhs === rhs }

    /// Hashes the object identity.
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
}
