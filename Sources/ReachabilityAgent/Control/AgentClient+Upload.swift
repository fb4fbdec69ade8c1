import FoundationEssentials
import LinuxSystem
import ResumableDownloads

extension AgentClient {
    /// How an upload job sends its file: `auto` asks the server (IETF resumable upload draft,
    /// then tus 1.0, else one plain request), or one protocol named outright.
    public enum UploadProtocol: String, Sendable, CaseIterable {
        /// Ask the server which resumable protocol it speaks; one plain request if none.
        case auto
        /// The IETF HTTP working group's resumable upload draft (-05), as Apple's client speaks it.
        case ietf
        /// tus 1.0 (creation, offset `HEAD`, `PATCH`).
        case tus
        /// One plain request (`PUT` unless `method` says otherwise): not resumable.
        case put
    }

    /// Queues an upload job of the file at `path` to `url` (http or https): the agent sends it on
    /// its own, following the path (it stops when the path goes and continues from the server's
    /// offset when it is back), after this program exits and across agent restarts. The file is
    /// opened here and the open file passed to the agent with the request (SCM_RIGHTS), so the
    /// agent sends only what this process can read: a file it may not read, a directory, a FIFO
    /// or a device is refused before the agent hears of it (`agentCode` `.invalidArgument`).
    /// `method` is the creation request's (IETF draft) or the plain request's (default POST, PUT
    /// for `.put`); `restartingPlain` lets a plain PUT be sent again from zero after a failure.
    public func addUpload(fileAt path: String, to url: URL, protocol choice: UploadProtocol = .auto,
                          method: String? = nil, restartingPlain: Bool = false) async throws(AgentClientError) -> AgentDownload {
        var httpMethod: HTTPMethod?
        if let method {
            guard let parsed = HTTPMethod(method) else {
                throw AgentClientError(.rejected, "'\(method)' is not an HTTP method token (POST, PUT ...)", agentCode: .invalidArgument)
            }
            httpMethod = parsed
        }
        let file: UploadSourceFile
        switch UploadSourceFile.open(path) {
        case .success(let opened): file = opened
        case .failure(let problem): throw AgentClientError(.rejected, problem.message, agentCode: .invalidArgument)
        }
        defer { file.descriptor.close() }
        let request = UploadJobRequest(file: file.path, protocol: ResumableDownloads.UploadProtocol(rawValue: choice.rawValue) ?? .auto,
                                       method: httpMethod, restartPlain: restartingPlain)
        guard let job = try await self.request(.addUpload(url: url, request), passing: file.descriptor).download else {
            throw AgentClientError(.noReply, "the agent's reply names no upload (an agent older than this client?)")
        }
        return job
    }
}

/// A file an upload is about to hand to the agent, opened by the caller: the one place that
/// checks it (the CLI's `queue add --upload`, `AgentClient.addUpload`, background upload tasks),
/// so the agent only ever gets a regular file its caller could read.
package struct UploadSourceFile: Sendable {
    /// Why the file cannot be uploaded, in words that say what to do.
    package struct Problem: Error, Sendable {
        package enum Kind: Sendable { case missing, unreadable, directory, notRegular, other }
        package var kind: Kind
        package var message: String
    }

    /// The absolute path (reports; reopening after an agent restart).
    package var path: String
    /// Open for reading, non-blocking (a FIFO never blocks the open); the caller closes it.
    package var descriptor: FileDescriptor
    package var status: FileStatus

    /// Opens `path` (made absolute against `currentDirectory`) and checks it is a regular file.
    package static func open(_ path: String, currentDirectory: String? = nil) -> Result<UploadSourceFile, Problem> {
        let base = currentDirectory ?? FileManager.default.currentDirectoryPath
        let absolute = path.hasPrefix("/") ? path : URL(fileURLWithPath: base).appendingPathComponent(path).standardizedFileURL.path
        let descriptor: FileDescriptor
        do {
            descriptor = try FileDescriptor.openForReading(absolute, nonBlocking: true)
        } catch {
            let kind: Problem.Kind = error == .noSuchFile || error == .notDirectory ? .missing
                : error == .permissionDenied || error == .operationNotPermitted ? .unreadable : .other
            let advice = kind == .unreadable
                ? " (the agent uploads only files you can read: ask the file's owner, or run this as a user who can read it)" : ""
            return .failure(Problem(kind: kind, message: "cannot open \(absolute) for reading: \(error)\(advice)"))
        }
        let status: FileStatus
        do {
            status = try descriptor.status()
        } catch {
            descriptor.close()
            return .failure(Problem(kind: .other, message: "cannot examine \(absolute): \(error)"))
        }
        guard status.kind == .regular else {
            descriptor.close()
            return .failure(Problem(kind: status.kind == .directory ? .directory : .notRegular,
                                    message: "\(absolute) is \(status.kindDescription); only regular files can be uploaded (they can be resumed)"))
        }
        return .success(UploadSourceFile(path: absolute, descriptor: descriptor, status: status))
    }
}
