import FoundationEssentials
import ResumableDownloads

extension AgentService {
    /// `setURL`: the queued download `text` names is fetched from `url` from now on, keeping its
    /// bytes (`DownloadAgent.replaceURL(of:with:)` says when they fit). A background session's
    /// transfer is its program's to change (`URLSessionTask`s have no such call).
    func setURL(_ text: String, to url: URL, id: ControlRequestID?, uid: UInt32) async -> ControlResponse {
        let downloads = await agent.downloads.filter { !backgroundEngineIDs.contains($0.id) }
        let backgroundIDs = backgroundTransferIDs(visibleTo: uid)
        let uuid: UUID
        switch DownloadIDResolver.resolve(text, among: downloads.map(\.id) + backgroundIDs) {
        case .failure(let error): return .failure(error, id: id)
        case .success(let resolved): uuid = resolved
        }
        guard let download = downloads.first(where: { $0.id == uuid }) else {
            return .failure(.invalidArgument("download \(Self.shortID(uuid)) belongs to a background session; its program gives its tasks their URLs"), id: id)
        }
        let wasFinal = download.state.isFinal
        do {
            _ = try await agent.replaceURL(of: download, with: url)
        } catch {
            return .failure(.invalidArgument("cannot set the URL of download \(Self.shortID(uuid)): \(error.description)"), id: id)
        }
        reportCache.forget(download.id)
        // A failed download's event stream had ended: follow the new run's events.
        if wasFinal, !download.state.isFinal { observe(download, skipping: reportedEvents[download.id] ?? 0) }
        refreshSummary()
        return .success(id: id, download: Self.snapshot(download))
    }
}
