import Foundation
import FoundationNetworking
import Synchronization

/// URLSession's Swift-concurrency download methods, for default and background sessions.
extension ResumableURLSession {
    /// Downloads `url` and returns the file (yours to move or delete: it is in the temporary
    /// directory, not the session's) and the response. Cancelling the calling task throws
    /// `URLError(.cancelled)` whose `downloadTaskResumeData` continues it when the stored bytes
    /// can be (pass it to `download(resumeFrom:)` or `downloadTask(withResumeData:)`), so the
    /// WWDC `withTaskCancellationHandler` pattern ports unchanged. In a background session, a
    /// download task made for the same request in that pattern's `onCancel` takes the transfer
    /// over where it is (then the error carries no resume data: the bytes are that task's).
    public func download(from url: URL) async throws -> (URL, URLResponse) {
        try await download(for: URLRequest(url: url))
    }

    /// `download(from:)` for a request (GET, its headers and `timeoutInterval`).
    public func download(for request: URLRequest) async throws -> (URL, URLResponse) {
        try await awaitDownload { downloadTask(with: request, completionHandler: $0) }
    }

    /// Continues the download `resumeData` describes; see `download(from:)`.
    public func download(resumeFrom resumeData: Data) async throws -> (URL, URLResponse) {
        try await awaitDownload { downloadTask(withResumeData: resumeData, completionHandler: $0) }
    }

    private func awaitDownload(
        _ make: (@escaping @Sendable (URL?, URLResponse?, (any Error)?) -> Void) -> ResumableDownloadTask
    ) async throws -> (URL, URLResponse) {
        try await awaitTask(make, onCancel: { [isBackground = configuration.isBackground] task in
            guard isBackground else { return task.cancelAwaited() }
            // After the caller's own cancellation handlers, not before. This one is the inner
            // handler and runs first; the WWDC pattern's `onCancel` (the outer one, on the same
            // thread right after) makes a download task for the same request, which joins this
            // transfer in the agent (duplicate in-flight requests are removed) only if it gets
            // there before this cancel. A handler slower than this delay costs a new transfer,
            // never a lost one.
            Task {
                try? await Task.sleep(for: ResumableURLSession.backgroundCancelDelay)
                task.cancelAwaited()
            }
        }) { location, response, error in
            guard let location, let response else { throw error ?? URLError(.unknown) }
            // The session deletes its file when this handler returns: the caller's copy goes to
            // the temporary directory first.
            do {
                return (try Self.keep(location), response)
            } catch {
                throw URLError(.cannotMoveFile, userInfo: [
                    NSLocalizedDescriptionKey: "cannot move the downloaded file out of \(location.deletingLastPathComponent().path): \(error.localizedDescription)",
                    NSUnderlyingErrorKey: error])
            }
        }
    }

    /// How long a background session's awaited download waits, once its Swift task is cancelled,
    /// before it cancels its task in the agent (see `awaitDownload`).
    static let backgroundCancelDelay = Duration.milliseconds(250)

    /// Moves (or, across file systems, copies) a delivered file to a new name in the temporary directory.
    static func keep(_ location: URL) throws -> URL {
        let kept = FileManager.default.temporaryDirectory.appendingPathComponent("reachability-download-\(UUID().uuidString).tmp")
        do {
            try FileManager.default.moveItem(at: location, to: kept)
        } catch {
            try FileManager.default.copyItem(at: location, to: kept)
        }
        return kept
    }
}
