// The iOS sample's DownloadService: start, pause (cancel by producing resume data), resume
// (from that data, else from scratch) and cancel, keyed by the track's URL. Only the session's
// type changed.

import Foundation
import ResumableURLSession

@MainActor
final class DownloadService {
    var activeDownloads: [URL: Download] = [:]
    /// The controller creates the session (it is the delegate).
    var downloadsSession: ResumableURLSession!   // iOS: URLSession!

    func startDownload(_ track: Track) {
        let download = Download(track: track)
        download.task = downloadsSession.downloadTask(with: track.previewURL)
        download.task?.resume()
        download.isDownloading = true
        activeDownloads[download.track.previewURL] = download
    }

    func pauseDownload(_ track: Track) {
        guard let download = activeDownloads[track.previewURL], download.isDownloading else { return }
        download.task?.cancel(byProducingResumeData: { data in
            // Runs on the delegate queue, the main queue here (Swift 6 wants that said).
            MainActor.assumeIsolated { download.resumeData = data }
        })
        download.isDownloading = false
    }

    func resumeDownload(_ track: Track) {
        guard let download = activeDownloads[track.previewURL] else { return }
        if let resumeData = download.resumeData {
            download.task = downloadsSession.downloadTask(withResumeData: resumeData)
        } else {
            download.task = downloadsSession.downloadTask(with: download.track.previewURL)
        }
        download.task?.resume()
        download.isDownloading = true
    }

    func cancelDownload(_ track: Track) {
        guard let download = activeDownloads[track.previewURL] else { return }
        download.task?.cancel()
        activeDownloads[track.previewURL] = nil
    }
}
