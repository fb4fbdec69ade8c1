import FoundationEssentials
import ReachabilityBase

extension DownloadAgent {
    /// Fetches `download` from `url` from now on, keeping its stored bytes (an expired
    /// presigned link or CDN token replaced by a new one, as BITS' `SetRemoteName`). Returns the
    /// URL it had.
    ///
    /// A transfer in flight is stopped and checkpointed first (as a pause) and goes on from the
    /// new URL; a queued or paused download stays so, with the new URL; one that failed (the
    /// old link answering 401/403/410, or any failure but a cancel) is queued again. Whether the
    /// stored bytes fit is decided by the resume rules as for any resume: the next request asks
    /// for the rest with the recorded validator in `If-Range`, so a server whose file differs
    /// (another length or validator) answers with the whole file and the download starts over
    /// from zero, with the reason in its `restartedFromZero` event; a given SHA-256 still
    /// checks the whole file at the end.
    package func replaceURL(of download: Download, with url: URL) async throws(DownloadError) -> URL {
        activate()
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https", url.host != nil else {
            throw DownloadError.unsupportedURL.with(description: "only http and https URLs can be downloaded: \(URLRedaction.redacted(url))")
        }
        guard !isShutDown, let entry = entries[download.id], entry.download === download else {
            throw DownloadError.invalidRequest.with(description: "the agent does not hold download \(download.id.uuidString)")
        }
        switch download.state {
        case .completed:
            throw DownloadError.invalidRequest.with(description: "the download has already completed; there is nothing left to fetch")
        case .failed(let error) where error == .cancelled:
            throw DownloadError.invalidRequest.with(description: "the download was cancelled and its bytes deleted; queue it again")
        default:
            break
        }
        // The driver reads its request's URL from the record once per attempt: stop it, so no
        // attempt of the old URL and one of the new run together or write the record in turn.
        let wasTransferring = entry.driver != nil
        if wasTransferring { await self.pause(download) }
        if download.state == .completed {
            throw DownloadError.invalidRequest.with(description: "the download completed meanwhile; there is nothing left to fetch")
        }
        guard var record = entries[download.id]?.record else {
            throw DownloadError.invalidRequest.with(description: "the agent no longer holds download \(download.id.uuidString)")
        }
        let previous = record.url
        record.url = url
        do {
            try record.write(to: stateDirectory())
        } catch {
            if wasTransferring { resume(download) }
            throw error as? DownloadError ?? .fileSystem.with(description: "cannot write the resume record: \(error)")
        }
        entries[download.id]?.record = record
        entries[download.id]?.host = gateHost(for: url, proxy: download.options.proxy)
        download.replaceURL(with: url)
        configuration.logger.info("download URL replaced", metadata: [
            "id": download.id.uuidString, "from": URLRedaction.redacted(previous), "to": URLRedaction.redacted(url)])
        switch download.state {
        case .paused where wasTransferring, .failed:
            // Stopped here, or ended by the old URL: queued again (an expired link is not
            // "resumable" from its own URL, so `resume` would refuse it).
            entries[download.id]?.intent = .run
            download.update(state: .queued)
            scheduler.enqueue(download.id, priority: download.options.priority)
            schedule()
        default:
            break   // queued: starts from the new URL; paused by its owner: stays paused
        }
        return previous
    }
}
