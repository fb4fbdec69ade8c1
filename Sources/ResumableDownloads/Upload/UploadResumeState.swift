import FoundationEssentials
import LinuxSystem

/// Which upload protocol to speak.
package enum UploadProtocol: String, Codable, Sendable, CaseIterable {
    /// Ask the server (`OPTIONS`: tus when it answers `Tus-Resumable`), else the IETF draft, which
    /// falls back to a plain upload when the server does not answer `104`.
    case auto
    /// draft-ietf-httpbis-resumable-upload-05 (`Upload-Draft-Interop-Version: 6`).
    case ietf
    /// tus 1.0 (creation, `HEAD`, `PATCH`).
    case tus
    /// One plain `PUT` (no resumption).
    case put
}

/// What identifies the file being uploaded: a change of any of these ends the upload
/// (LinuxSystem's `FileIdentity`, under the name the upload code knows it by).
package typealias UploadFileIdentity = FileIdentity

/// Everything needed to continue an upload later: where the server keeps it, how much it
/// acknowledged, which protocol, and which file (a changed file is refused). Encodable as JSON.
package struct UploadResumeState: Codable, Sendable, Hashable {
    /// The format of this value; a newer one is refused.
    package static let currentVersion = 1

    package var version = Self.currentVersion
    /// The URL the upload was sent to.
    package var url: URL
    /// The resource holding the partial upload (the server's `Location`).
    package var uploadURL: URL
    /// `.ietf` or `.tus`.
    package var protocolInUse: UploadProtocol
    /// Bytes the server confirmed it holds.
    package var acknowledgedOffset: Int64
    /// The most bytes of the file ever handed to a connection: the server may hold up to this
    /// many (an append whose answer was lost in the cut), so an offset up to it is no lie. Absent
    /// in older resume data: then the file's length bounds it.
    package var sentUpTo: Int64?
    /// The file's length.
    package var length: Int64
    package var file: UploadFileIdentity
    /// The file's path when the upload began.
    package var filePath: String

    package init(url: URL, uploadURL: URL, protocolInUse: UploadProtocol, acknowledgedOffset: Int64,
                 sentUpTo: Int64? = nil, length: Int64, file: UploadFileIdentity, filePath: String) {
        self.url = url
        self.uploadURL = uploadURL
        self.protocolInUse = protocolInUse
        self.acknowledgedOffset = acknowledgedOffset
        self.sentUpTo = sentUpTo
        self.length = length
        self.file = file
        self.filePath = filePath
    }

    /// Throws `invalidRequest` when the state cannot be continued as it is (another version, a
    /// protocol without resumption, offsets out of bounds, URLs that are not http(s)).
    package func validate() throws(DownloadError) {
        guard version == Self.currentVersion else {
            throw DownloadError.invalidRequest.with(description: "the upload resume data is version \(version); this program reads \(Self.currentVersion)")
        }
        guard protocolInUse == .ietf || protocolInUse == .tus else {
            throw DownloadError.invalidRequest.with(description: "the upload resume data names a protocol without resumption")
        }
        guard length >= 0, (0...length).contains(acknowledgedOffset), file.size == length,
              (acknowledgedOffset...length).contains(sentUpTo ?? length) else {
            throw DownloadError.invalidRequest.with(description: "the upload resume data has offsets out of bounds")
        }
        for candidate in [url, uploadURL] {
            guard let scheme = candidate.scheme?.lowercased(), scheme == "http" || scheme == "https", candidate.host != nil else {
                throw DownloadError.invalidRequest.with(description: "the upload resume data has a URL that is not http(s)")
            }
        }
    }
}
