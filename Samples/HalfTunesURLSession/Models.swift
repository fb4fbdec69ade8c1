// The iOS sample's two models, unchanged but for the task's type and @MainActor (Swift 6: the
// controller, the service and these are only touched on the main queue).

import Foundation
import ResumableURLSession

/// A song to fetch. On iOS it came from a search; here from the command line.
@MainActor
final class Track {
    let name: String
    let index: Int
    let previewURL: URL
    var downloaded = false

    init(name: String, previewURL: URL, index: Int) {
        self.name = name
        self.previewURL = previewURL
        self.index = index
    }
}

/// One download in progress: its task, its progress, and the resume data a pause produced.
@MainActor
final class Download {
    var isDownloading = false
    var progress: Float = 0
    var resumeData: Data?
    var task: ResumableDownloadTask?   // iOS: URLSessionDownloadTask?
    var track: Track
    /// "5.2 MB": iOS handed it straight to the cell.
    var totalSize: String?

    init(track: Track) {
        self.track = track
    }
}
