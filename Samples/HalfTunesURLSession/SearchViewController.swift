// The iOS sample's view controller, in a terminal: the track list is a TerminalTableView, and
// the URLSessionDownloadDelegate extension keeps its methods. Added, as in the Reachability +
// resume-data recipe: a dropped connection's resume data is used at once when the network is
// still there, written to disk when it is not, and picked up again when Reachability says the
// network is back or on the next launch.

import Foundation
import LinuxReachability
import ResumableURLSession

@MainActor
final class SearchViewController {
    let downloadService = DownloadService()
    let reachability = Reachability()
    let tableView: TerminalTableView
    let tracks: [Track]
    let documentsPath: URL
    let stateDirectory: URL
    /// The seed's final project: a background session, whose downloads go on after quitting.
    let background: BackgroundOptions?
    /// What each row says besides progress ("paused", "offline: resume data saved", ...).
    var status: [URL: String] = [:]
    var failed: Set<URL> = []

    lazy var downloadsSession: ResumableURLSession = {
        if let background {
            // iOS: URLSessionConfiguration.background(withIdentifier: "com.raywenderlich.HalfTunes.bgSession")
            var configuration = ResumableURLSession.Configuration.background(withIdentifier: background.identifier)
            configuration.agentExecutable = background.agent
            if let directory = background.stateDirectory { configuration.stateDirectory = directory }
            if let connections = background.connections { configuration.httpMaximumConnectionsPerHost = connections }
            return ResumableURLSession(configuration: configuration, delegate: self, delegateQueue: .main)
        }
        // iOS: URLSessionConfiguration.default; resume data is accepted by sessions on the same
        // state directory, in this process or a later one.
        let configuration = ResumableURLSession.Configuration(stateDirectory: stateDirectory)
        return ResumableURLSession(configuration: configuration, delegate: self, delegateQueue: .main)
    }()

    init(urls: [URL], names: [String] = [], documentsPath: URL, stateDirectory: URL, background: BackgroundOptions? = nil,
         tableView: TerminalTableView) {
        tracks = urls.enumerated().map { index, url in
            Track(name: index < names.count ? names[index] : url.lastPathComponent, previewURL: url, index: index)
        }
        self.documentsPath = documentsPath
        self.stateDirectory = stateDirectory
        self.background = background
        self.tableView = tableView
    }

    func viewDidLoad() {
        guard background == nil else { return backgroundViewDidLoad() }
        downloadService.downloadsSession = downloadsSession
        reachability.whenReachable = { [weak self] reachability in
            MainActor.assumeIsolated { self?.networkBecameReachable(reachability) }
        }
        reachability.whenUnreachable = { [weak self] _ in
            MainActor.assumeIsolated { self?.tableView.show(message: "network: offline") }
        }
        do {
            try reachability.startNotifier()
        } catch {
            tableView.show(message: "warning: not watching the network (\(error))")
        }
        for track in tracks {
            if FileManager.default.fileExists(atPath: localFilePath(for: track.previewURL).path) {
                track.downloaded = true
            } else if !resumeSavedDownload(track) {
                downloadTapped(track)
            }
            reload(track)
        }
    }

    func localFilePath(for url: URL) -> URL {
        documentsPath.appendingPathComponent(url.lastPathComponent)
    }

    /// Where resume data waits for the network (or the next launch).
    func resumeDataURL(for url: URL) -> URL {
        documentsPath.appendingPathComponent(url.lastPathComponent + ".resumedata")
    }

    /// Done when every track is downloaded, failed or cancelled.
    var isFinished: Bool {
        tracks.allSatisfy { $0.downloaded || failed.contains($0.previewURL) }
    }

    // MARK: TrackCellDelegate (the keys)

    func downloadTapped(_ track: Track) {
        status[track.previewURL] = "downloading"
        downloadService.startDownload(track)
        reload(track)
    }

    func pauseTapped(_ track: Track) {
        downloadService.pauseDownload(track)
        status[track.previewURL] = "paused"
        reload(track)
    }

    func resumeTapped(_ track: Track) {
        status[track.previewURL] = "downloading"
        downloadService.resumeDownload(track)
        reload(track)
    }

    func cancelTapped(_ track: Track) {
        downloadService.cancelDownload(track)
        status[track.previewURL] = "cancelled"
        failed.insert(track.previewURL)
        reload(track)
    }

    // MARK: the resume-data recipe

    func networkBecameReachable(_ reachability: Reachability) {
        tableView.show(message: "network: reachable via \(reachability.connection)")
        for track in tracks where !track.downloaded { _ = resumeSavedDownload(track) }
    }

    /// Continues a download from resume data saved on disk; false when there is none.
    func resumeSavedDownload(_ track: Track) -> Bool {
        let saved = resumeDataURL(for: track.previewURL)
        guard let resumeData = try? Data(contentsOf: saved) else { return false }
        try? FileManager.default.removeItem(at: saved)
        let download = downloadService.activeDownloads[track.previewURL] ?? Download(track: track)
        download.resumeData = resumeData
        downloadService.activeDownloads[track.previewURL] = download
        status[track.previewURL] = "resuming from saved resume data"
        downloadService.resumeDownload(track)
        download.resumeData = nil
        reload(track)
        return true
    }

    /// Quitting: pause what runs and keep its resume data on disk for the next launch (a
    /// background session's downloads go on in the agent: nothing to save).
    func saveForNextLaunch() async {
        guard background == nil else { return }
        for download in downloadService.activeDownloads.values where download.isDownloading {
            guard let task = download.task else { continue }
            download.isDownloading = false
            if let resumeData = await task.cancelByProducingResumeData() {
                try? resumeData.write(to: resumeDataURL(for: download.track.previewURL), options: .atomic)
            }
        }
    }

    // MARK: the table

    func reload(_ track: Track) {
        let download = downloadService.activeDownloads[track.previewURL]
        tableView.reloadRow(at: track.index, .init(number: track.index + 1, name: track.name,
                                                   progress: track.downloaded ? 1 : download?.progress ?? 0,
                                                   totalSize: download?.totalSize,
                                                   state: track.downloaded ? "downloaded" : status[track.previewURL] ?? "waiting"))
    }
}

// MARK: - URLSessionDownloadDelegate

extension SearchViewController: ResumableURLSessionDownloadDelegate {
    // Delegate calls arrive on the main queue (delegateQueue: .main), so the main actor's
    // state may be used directly; Swift 6 wants that said with assumeIsolated.

    nonisolated func urlSession(_ session: ResumableURLSession, downloadTask: ResumableDownloadTask,
                                didFinishDownloadingTo location: URL) {
        MainActor.assumeIsolated {
            guard let sourceURL = downloadTask.originalRequest?.url else { return }
            let download = downloadService.activeDownloads[sourceURL]
            downloadService.activeDownloads[sourceURL] = nil
            let destinationURL = localFilePath(for: sourceURL)
            let fileManager = FileManager.default
            try? fileManager.removeItem(at: destinationURL)
            do {
                try fileManager.copyItem(at: location, to: destinationURL)
                // A background session replays files that finished while the program was not
                // running: no Download for them in this launch, the track is found by its URL.
                (download?.track ?? tracks.first { $0.previewURL == sourceURL })?.downloaded = true
                status[sourceURL] = "downloaded to \(destinationURL.path)"
            } catch {
                status[sourceURL] = "could not copy file to disk: \(error.localizedDescription)"
                failed.insert(sourceURL)
            }
            if let track = download?.track ?? tracks.first(where: { $0.previewURL == sourceURL }) {
                reload(track)
                tableView.show(event: "\(track.index + 1). \(track.name): \(status[sourceURL] ?? "")")
            }
        }
    }

    nonisolated func urlSession(_ session: ResumableURLSession, downloadTask: ResumableDownloadTask,
                                didWriteData bytesWritten: Int64, totalBytesWritten: Int64,
                                totalBytesExpectedToWrite: Int64) {
        MainActor.assumeIsolated {
            guard let url = downloadTask.originalRequest?.url, let download = downloadService.activeDownloads[url] else { return }
            download.progress = totalBytesExpectedToWrite > 0 ? Float(totalBytesWritten) / Float(totalBytesExpectedToWrite) : 0
            download.totalSize = totalBytesExpectedToWrite > 0
                ? ByteCountFormatter.string(fromByteCount: totalBytesExpectedToWrite, countStyle: .file) : nil
            status[url] = "downloading"
            reload(download.track)
        }
    }

    nonisolated func urlSession(_ session: ResumableURLSession, downloadTask: ResumableDownloadTask,
                                didResumeAtOffset fileOffset: Int64, expectedTotalBytes: Int64) {
        MainActor.assumeIsolated {
            guard let url = downloadTask.originalRequest?.url, let download = downloadService.activeDownloads[url] else { return }
            tableView.show(event: "\(download.track.index + 1). \(download.track.name): resumed at byte \(fileOffset)")
        }
    }

    nonisolated func urlSession(_ session: ResumableURLSession, task: ResumableDownloadTask,
                                didCompleteWithError error: (any Error)?) {
        MainActor.assumeIsolated {
            // By the task, not its originalRequest: a task whose resume data was refused has none
            // (the URL inside untrusted data is not believed).
            guard let error = error as NSError?,
                  let download = downloadService.activeDownloads.values.first(where: { $0.task === task }) else { return }
            let track = download.track
            let url = track.previewURL
            let label = "\(track.index + 1). \(track.name)"
            if error.code == NSURLErrorNetworkConnectionLost || error.code == NSURLErrorNotConnectedToInternet,
               let resumeData = error.userInfo[NSURLSessionDownloadTaskResumeData] as? Data {
                // The recipe: resume at once if the network is there, else keep the data.
                if reachability.connection != .unavailable {
                    tableView.show(event: "\(label): connection lost, resuming")
                    download.resumeData = resumeData
                    downloadService.resumeDownload(track)
                    download.resumeData = nil
                } else {
                    do {
                        try resumeData.write(to: resumeDataURL(for: url), options: .atomic)
                        status[url] = "offline: resume data saved"
                        tableView.show(event: "\(label): offline, resume data saved to \(resumeDataURL(for: url).path)")
                    } catch {
                        status[url] = "offline, and the resume data could not be saved: \(error.localizedDescription)"
                        failed.insert(url)
                    }
                    download.isDownloading = false
                }
            } else if error.code == NSURLErrorCancelled {
                // Pause (resume data kept in memory) or cancel: the key handler said so already.
            } else if error.code == NSURLErrorCannotWriteToFile, download.resumeData == nil,
                      error.userInfo[NSUnderlyingErrorKey] is ResumeDataError {
                // Resume data that no longer fits its partial file: start over, as the seed does
                // when it has none.
                tableView.show(event: "\(label): \(error.localizedDescription); starting over")
                downloadService.startDownload(track)
            } else {
                status[url] = "failed: \(error.localizedDescription)"
                failed.insert(url)
                downloadService.activeDownloads[url] = nil
            }
            reload(track)
        }
    }
}
