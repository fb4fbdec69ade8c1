import ResumableDownloads

/// One reply line.
package struct ControlResponse: Codable, Sendable, Equatable {
    package var version: Int = ControlProtocol.version
    package var id: ControlRequestID?
    package var ok: Bool
    package var error: ControlError?
    package var download: AgentDownload?
    package var downloads: [AgentDownload]?
    package var status: AgentStatus?
    /// The metrics text, for `metrics` (in the format asked for).
    package var metrics: String?
    /// `attach`: the session's tasks.
    package var attachment: BackgroundAttachment?
    /// `taskAction` cancelProducingResumeData: the state resume data is made from.
    package var resumeState: ResumeState?
    /// An event pushed to an attached session (no `id`).
    package var event: BackgroundEvent?
    /// `list` with `rows`: how many downloads it left out.
    package var omittedDownloads: Int?

    package static func failure(_ error: ControlError, id: ControlRequestID?) -> ControlResponse {
        ControlResponse(id: id, ok: false, error: error)
    }
    package static func success(id: ControlRequestID?, download: AgentDownload? = nil, downloads: [AgentDownload]? = nil,
                        status: AgentStatus? = nil, metrics: String? = nil, attachment: BackgroundAttachment? = nil,
                        resumeState: ResumeState? = nil) -> ControlResponse {
        ControlResponse(id: id, ok: true, download: download, downloads: downloads, status: status, metrics: metrics,
                        attachment: attachment, resumeState: resumeState)
    }

    /// An event line for an attached session.
    package static func push(_ event: BackgroundEvent) -> ControlResponse {
        ControlResponse(id: nil, ok: true, event: event)
    }
}
