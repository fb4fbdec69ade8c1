import FoundationEssentials

extension ControlCodec {
    /// `setURL`: a download ID and an http or https URL (issue 34: an expired link replaced).
    static func decodeSetURL(_ request: ControlRequest) -> Result<ControlCommand, ControlError> {
        guard let download = request.download, !download.isEmpty else {
            return .failure(.invalidArgument("setURL needs a 'download' ID"))
        }
        guard let url = downloadableURL(request.url) else {
            return .failure(.invalidArgument("setURL needs an http or https 'url'"))
        }
        return .success(.setURL(download, url: url))
    }
}
