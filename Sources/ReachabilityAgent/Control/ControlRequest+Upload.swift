import FoundationEssentials
import ResumableDownloads

/// `addUpload`'s fields: which file (the path the caller named, for reports and for reopening
/// it after an agent restart) and how to send it. The file itself is not named by the path:
/// the caller opens it and passes the descriptor with the request line (SCM_RIGHTS), so the
/// agent uploads only what the caller could read.
///
/// ```
/// → {"version":1,"id":1,"command":"addUpload","url":"http://…/files/","upload":{"file":"/home/me/photo.jpg","protocol":"auto"}}
/// ```
package struct UploadJobRequest: Codable, Sendable, Hashable {
    /// The file's absolute path as the caller named it.
    package var file: String
    /// `auto`, `ietf`, `tus` or `put`.
    package var `protocol`: String
    /// The creation (IETF draft) or plain request's method; absent: POST, or PUT with `put`.
    package var method: String?
    /// A plain PUT may be sent again from zero after a failure.
    package var restartPlain: Bool?

    package init(file: String, protocol: UploadProtocol = .auto, method: HTTPMethod? = nil, restartPlain: Bool = false) {
        self.file = file
        self.protocol = `protocol`.rawValue
        self.method = method?.description
        self.restartPlain = restartPlain ? true : nil
    }

    /// The protocol named, when it is one.
    package var protocolChoice: UploadProtocol? { UploadProtocol(rawValue: `protocol`) }

    /// The method to send: the one named, else PUT for `put` and POST otherwise.
    package var requestMethod: HTTPMethod? {
        guard let method else { return protocolChoice == .put ? .put : .post }
        return HTTPMethod(method)
    }
}

extension ControlCodec {
    /// `addUpload` with an http(s) URL, an absolute file path, a known protocol and a method token.
    static func decodeUpload(_ request: ControlRequest) -> Result<ControlCommand, ControlError> {
        guard let text = request.url, let url = URL(string: text),
              let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https", url.host != nil else {
            return .failure(.invalidArgument("addUpload needs an http or https 'url'"))
        }
        guard let upload = request.upload else { return .failure(.invalidArgument("addUpload needs 'upload'")) }
        guard upload.file.hasPrefix("/"), !upload.file.utf8.contains(0), upload.file.utf8.count <= 4096 else {
            return .failure(.invalidArgument("'upload.file' must be an absolute path"))
        }
        guard upload.protocolChoice != nil else {
            let names = UploadProtocol.allCases.map(\.rawValue).joined(separator: ", ")
            return .failure(.invalidArgument("'upload.protocol' must be one of \(names)"))
        }
        guard upload.requestMethod != nil else {
            return .failure(.invalidArgument("'upload.method' must be an HTTP method token such as POST or PUT"))
        }
        return .success(.addUpload(url: url, upload))
    }
}
