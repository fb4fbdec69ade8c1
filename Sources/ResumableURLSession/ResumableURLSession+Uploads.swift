import Foundation
import FoundationNetworking
import ResumableDownloads

/// An upload task: as on Apple platforms, a data task whose request body comes from `Data` or a
/// file; the response and its body reach the data delegate or the completion handler, and
/// `didSendBodyData` reports the body going out.
///
/// An upload from a file is resumable when its server is (IETF resumable upload draft or tus,
/// asked before the file goes): a drop ends it with -1005 and
/// `URLError.uploadTaskResumeData`, or with `waitsForConnectivity` it continues by itself from
/// the server's offset when the path is back; `cancel(byProducingResumeData:)` stops it with
/// resume data. A plain server gets one request and, on a drop, -1005 without resume data.
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

    /// A suspended task that continues the upload `resumeData` describes (from a failed or
    /// cancelled upload task of a session with the same state directory): the server is asked
    /// its offset and only the rest of the file is sent. Data that is not such resume data, was
    /// altered, or whose file changed since makes the task complete with `cannotWriteToFile`
    /// (-3003) and the reason as its underlying `ResumeDataError`, or with the file's error.
    public func uploadTask(withResumeData resumeData: Data) -> ResumableUploadTask {
        makeResumedUploadTask(resumeData, completionHandler: nil)
    }

    /// `uploadTask(withResumeData:)`, its outcome (the server's response and body) to `completionHandler`.
    public func uploadTask(withResumeData resumeData: Data,
                           completionHandler: @escaping @Sendable (Data?, URLResponse?, (any Error)?) -> Void) -> ResumableUploadTask {
        makeResumedUploadTask(resumeData, completionHandler: completionHandler)
    }

    /// Continues the upload `resumeData` describes and returns the server's response body and response.
    public func upload(withResumeData resumeData: Data) async throws -> (Data, URLResponse) {
        try await awaitData { uploadTask(withResumeData: resumeData, completionHandler: $0) }
    }

    private func makeResumedUploadTask(_ resumeData: Data,
                                       completionHandler: (@Sendable (Data?, URLResponse?, (any Error)?) -> Void)?) -> ResumableUploadTask {
        let state: Result<UploadResumeState, ResumeDataError> = resumeDataKey().flatMap { key in
            do {
                return .success(try UploadResumeData.decode(resumeData, key: key))
            } catch let error as ResumeDataError {
                return .failure(error)
            } catch {
                return .failure(.malformed.with("\(error)"))
            }
        }
        var request: URLRequest
        let body: DataExchangeBody?
        switch state {
        case .success(let state):
            request = URLRequest(url: state.url)
            body = .file(URL(fileURLWithPath: state.filePath))
        case .failure:
            // Never started: the task completes with the refusal when resumed.
            request = URLRequest(url: URL(string: "http://invalid.invalid/")!)
            body = nil
        }
        request.httpMethod = "POST"
        return ResumableDataTask(session: self, identifier: makeTaskIdentifier(), request: request, body: body,
                                 resuming: state, completionHandler: completionHandler)
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
