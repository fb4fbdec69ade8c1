import Foundation
import FoundationNetworking

/// An upload task: as on Apple platforms, a data task whose request body comes from `Data` or a
/// file; the response and its body reach the data delegate or the completion handler, and
/// `didSendBodyData` reports the body going out.
public typealias ResumableUploadTask = ResumableDataTask

/// URLSession's upload tasks and their async forms, run in this process.
extension ResumableURLSession {
    /// A suspended task that sends `request` with the file at `fileURL` as its body (the
    /// request's `httpBody` is ignored). The file is opened when the task starts: a missing one
    /// ends it with `fileDoesNotExist`, a directory with `fileIsDirectory`, anything but a
    /// regular file (a FIFO, a device) or one it may not read with `noPermissionsToReadFile`; a
    /// file that changes while it is sent (size, modification time, inode) ends it with an error
    /// before its last byte goes, so the server never completes a mixed body.
    public func uploadTask(with request: URLRequest, fromFile fileURL: URL) -> ResumableUploadTask {
        makeDataTask(request, body: .file(fileURL), completionHandler: nil)
    }

    /// A suspended task that sends `request` with `bodyData` as its body.
    public func uploadTask(with request: URLRequest, from bodyData: Data) -> ResumableUploadTask {
        makeDataTask(request, body: .data(bodyData), completionHandler: nil)
    }

    /// `uploadTask(with:fromFile:)`, its outcome (the server's response and body) to `completionHandler`.
    public func uploadTask(with request: URLRequest, fromFile fileURL: URL,
                           completionHandler: @escaping @Sendable (Data?, URLResponse?, (any Error)?) -> Void) -> ResumableUploadTask {
        makeDataTask(request, body: .file(fileURL), completionHandler: completionHandler)
    }

    /// `uploadTask(with:from:)`, its outcome (the server's response and body) to `completionHandler`.
    public func uploadTask(with request: URLRequest, from bodyData: Data?,
                           completionHandler: @escaping @Sendable (Data?, URLResponse?, (any Error)?) -> Void) -> ResumableUploadTask {
        makeDataTask(request, body: .data(bodyData ?? Data()), completionHandler: completionHandler)
    }

    /// Sends `request` with the file as its body and returns the server's response body and response.
    public func upload(for request: URLRequest, fromFile fileURL: URL) async throws -> (Data, URLResponse) {
        try await awaitData { uploadTask(with: request, fromFile: fileURL, completionHandler: $0) }
    }

    /// Sends `request` with `bodyData` as its body and returns the server's response body and response.
    public func upload(for request: URLRequest, from bodyData: Data) async throws -> (Data, URLResponse) {
        try await awaitData { uploadTask(with: request, from: bodyData, completionHandler: $0) }
    }
}
