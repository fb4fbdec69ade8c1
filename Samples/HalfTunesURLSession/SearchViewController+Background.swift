// The seed's background configuration (its final project): the session is a background one,
// so its downloads belong to the user's download agent and go on after the program quits. On the
// next launch the tracks that finished meanwhile arrive through didFinishDownloadingTo (replayed
// by the agent), and the ones still running are found again with getAllTasks instead of being
// started twice. iOS relaunches the app for the events and calls
// application(_:handleEventsForBackgroundURLSession:completionHandler:); here the agent can start
// the program (`sessionSendsLaunchEvents`), or the user does.

import Foundation
import ResumableURLSession

/// `--background`: the session identifier and, when the agent is not on PATH, its binary.
struct BackgroundOptions: Sendable {
    var identifier = "com.raywenderlich.HalfTunes.bgSession"
    var agent: URL?
    /// The agent's state directory (`--state-dir`); nil for the agent's own default.
    var stateDirectory: URL?
    /// `httpMaximumConnectionsPerHost` (`--connections`); nil keeps the default (6).
    var connections: Int?
}

extension SearchViewController {
    /// viewDidLoad for a background session: a track downloaded earlier is there; a track whose
    /// task the agent still runs gets that task back; the others start.
    func backgroundViewDidLoad() {
        downloadService.downloadsSession = downloadsSession
        downloadsSession.getAllTasks { tasks in
            MainActor.assumeIsolated {
                for track in self.tracks {
                    if FileManager.default.fileExists(atPath: self.localFilePath(for: track.previewURL).path) {
                        track.downloaded = true
                    } else if let task = tasks.first(where: { $0.originalRequest?.url == track.previewURL }) {
                        let download = Download(track: track)
                        download.task = task
                        download.isDownloading = true
                        if task.countOfBytesExpectedToReceive > 0 {
                            download.progress = Float(task.countOfBytesReceived) / Float(task.countOfBytesExpectedToReceive)
                        }
                        self.downloadService.activeDownloads[track.previewURL] = download
                        self.status[track.previewURL] = "downloading (continued in the background)"
                    } else if self.status[track.previewURL] == nil {
                        self.downloadTapped(track)
                    }
                    self.reload(track)
                }
            }
        }
    }
}

extension SearchViewController {
    // iOS: the app delegate keeps the system's completion handler and the view controller calls
    // it here; a program has nothing to hand back, so it says so.
    nonisolated func urlSessionDidFinishEvents(forBackgroundURLSession session: ResumableURLSession) {
        MainActor.assumeIsolated {
            tableView.show(message: "background: every event that waited for this launch was handled")
        }
    }
}
