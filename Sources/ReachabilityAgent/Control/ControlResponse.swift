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

    package static func failure(_ error: ControlError, id: ControlRequestID?) -> ControlResponse {
        ControlResponse(id: id, ok: false, error: error)
    }
    package static func success(id: ControlRequestID?, download: AgentDownload? = nil, downloads: [AgentDownload]? = nil,
                        status: AgentStatus? = nil, metrics: String? = nil) -> ControlResponse {
        ControlResponse(id: id, ok: true, download: download, downloads: downloads, status: status, metrics: metrics)
    }
}
