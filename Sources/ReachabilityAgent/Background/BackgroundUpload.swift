import FoundationEssentials
import ResumableDownloads

// A background session's upload task (issue 28) as the session asks for it and as the agent
// hands back its outcome. The file itself never travels by name: the session opens it and
// passes the open file with `createTask` (SCM_RIGHTS), so the agent sends only what the
// program could read; the path is kept for reports and for reopening it after an agent restart.

/// What makes a background task an upload: the file and how to send it.
package struct BackgroundUploadSpec: Codable, Sendable, Hashable {
    /// The file's absolute path when the task was made.
    package var file: String
    /// The creation (IETF draft) or plain request's method.
    package var method: String = "POST"
    /// The file as the agent saw it through the passed descriptor (set by the agent, never
    /// taken from the session): another file at the path, or this one changed, ends the task.
    package var identity: UploadFileIdentity?
    /// Where an earlier task left the upload (`uploadTask(withResumeData:)`): the agent asks
    /// that resource its offset and sends only the rest, never the file from zero.
    package var resume: UploadResumeState?

    package init(file: String, method: String) {
        self.file = file
        self.method = method
    }

    /// Why the upload part of a task is unusable, or nil.
    var problem: String? {
        guard file.hasPrefix("/"), !file.utf8.contains(0), file.utf8.count <= 4096 else {
            return "the upload's file must be an absolute path (at most 4096 bytes)"
        }
        guard HTTPMethod(method) != nil else { return "the upload's method must be an HTTP token such as POST or PUT" }
        if let resume {
            do { try resume.validate() } catch { return "the upload's resume data: \(error.description)" }
            guard resume.filePath == file else { return "the upload's resume data is for another file (\(resume.filePath))" }
        }
        return nil
    }
}

/// The server's final answer to a background upload, kept with its `finished` event until the
/// session acknowledges it (then `didReceive response`, `didReceive data`, `didCompleteWithError(nil)`).
package struct BackgroundUploadResponse: Codable, Sendable, Hashable {
    package var statusCode: Int
    /// Field values by lowercased name.
    package var headers: [String: String]
    /// The response body, at most `maximumBodyLength` bytes (the rest is dropped, and the
    /// event says so with `isBodyTruncated`): it lives in the session's record until acknowledged.
    package var body: Data
    package var isBodyTruncated: Bool = false

    /// 1 MiB: an upload's answer is a status and a short document, not a download.
    package static let maximumBodyLength = 1 << 20

    package init(statusCode: Int, headers: [String: String], body: Data) {
        self.statusCode = statusCode
        self.headers = headers
        self.body = body.count > Self.maximumBodyLength ? body.prefix(Self.maximumBodyLength) : body
        isBodyTruncated = body.count > Self.maximumBodyLength
    }
}
