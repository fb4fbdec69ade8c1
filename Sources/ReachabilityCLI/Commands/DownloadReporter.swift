import FoundationEssentials
import LinuxReachability
import ResumableDownloads
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Turns download events and progress into output: NDJSON on stdout (`--json`) or text lines on
/// stderr, plus one progress bar per download on stderr when it is a terminal.
///
/// Event lines and bars share stderr, so every write goes through one lock: the bars are erased,
/// the line printed, the bars drawn again below it.
final class DownloadReporter: Sendable {
    private struct State {
        var drawnLines = 0
        var reportedBytes: [UUID: Int64] = [:]
    }

    private let context: CommandContext
    private let isJSON: Bool
    private let drawsProgress: Bool
    private let usesColor: Bool
    private let state = Mutex(State())

    init(context: CommandContext, isJSON: Bool, drawsProgress: Bool, usesColor: Bool) {
        self.context = context
        self.isJSON = isJSON
        self.drawsProgress = drawsProgress
        self.usesColor = usesColor
    }

    /// Whether fd 2 is a terminal (progress bars only then, so logs and pipes stay clean).
    static func standardErrorIsTerminal() -> Bool { isatty(2) == 1 }

    /// Reports every event of `download` (recent ones replayed first) until it completes or fails,
    /// or the task is cancelled (interrupt: the agent was shut down and the download paused).
    func follow(_ download: Download) async {
        for await event in download.events {
            report(event, of: download)
        }
    }

    /// Redraws bars (terminal) and prints `progress` NDJSON lines (`--json`) for the downloads
    /// `current` returns (they come and go as slots free up), until cancelled.
    func drawProgress(_ current: @escaping @Sendable () -> [Download]) async {
        guard drawsProgress || isJSON else { return }
        var isLastFrame = false
        while true {
            let downloads = current()
            if isJSON {
                for download in downloads {
                    let progress = download.progress
                    let isNew = state.withLock { state in
                        guard state.reportedBytes[download.id] != progress.bytesReceived else { return false }
                        state.reportedBytes[download.id] = progress.bytesReceived
                        return true
                    }
                    if isNew { context.output.line(jsonLine(download, event: "progress", progress: progress)) }
                }
            }
            if drawsProgress {
                let bars = downloads.map(bar)
                state.withLock { state in
                    context.errorOutput.text(erase(state.drawnLines) + bars.map { $0 + "\n" }.joined())
                    state.drawnLines = bars.count
                }
            }
            // After cancellation one more frame shows the final state (done, paused, failed).
            if isLastFrame { return }
            do { try await Task.sleep(for: .milliseconds(250)) } catch { isLastFrame = true }
        }
    }

    /// Leaves the last bars on screen and stops redrawing them.
    func finishProgress() {
        state.withLock { $0.drawnLines = 0 }
    }

    // MARK: events

    func report(_ event: DownloadEvent, of download: Download) {
        if isJSON {
            context.output.line(jsonLine(download, event: Self.name(of: event), progress: download.progress, detail: event))
            return
        }
        let line = "\(Timestamp.iso8601(context.now())) \(download.destination.lastPathComponent): \(Self.text(of: event))"
        state.withLock { state in
            // Erase the bars, print the event above where they were; the next tick redraws them.
            context.errorOutput.text(erase(state.drawnLines) + line + "\n")
            state.drawnLines = 0
        }
    }

    /// A destination that already held the verified file: a `completed` event without a transfer.
    func reportAlreadyComplete(_ job: DownloadCommand.Job) {
        if isJSON {
            let size = (try? FileManager.default.attributesOfItem(atPath: job.destination.path)[.size] as? Int) ?? nil
            let object = JSONValue.object([
                "time": .string(Timestamp.iso8601(context.now())), "id": .null, "url": .string(job.url.absoluteString),
                "file": .string(job.destination.path), "event": .string("completed"), "offset": .null,
                "bytes": size.map(JSONValue.integer) ?? .null, "total": size.map(JSONValue.integer) ?? .null,
                "bytesPerSecond": .integer(0), "retryDelayMilliseconds": .null,
                "reason": .string("already complete (matches --sha256)"),
                "errorCode": .null, "httpStatus": .null, "message": .null,
            ])
            context.output.line(object.serialized)
        } else {
            let line = "\(Timestamp.iso8601(context.now())) \(job.destination.lastPathComponent): already complete (matches --sha256)"
            state.withLock { state in
                context.errorOutput.text(erase(state.drawnLines) + line + "\n")
                state.drawnLines = 0
            }
        }
    }

    /// The event's name in NDJSON.
    static func name(of event: DownloadEvent) -> String {
        switch event {
        case .started: "started"
        case .resumed: "resumed"
        case .waitingForConnectivity: "waiting"
        case .restartedFromZero: "restarted"
        case .retrying: "retrying"
        case .paused: "paused"
        case .completed: "completed"
        case .failed: "failed"
        }
    }

    /// The event as words for a text line.
    static func text(of event: DownloadEvent) -> String {
        switch event {
        case .started: "started"
        case .resumed(let offset): "resumed at byte \(offset)"
        case .waitingForConnectivity: "waiting for network"
        case .restartedFromZero(let reason): "restarted from zero: \(reason)"
        case .retrying(let delay, let error): "retrying in \(seconds(delay)): \(error.description)"
        case .paused: "paused"
        case .completed(let url): "completed: \(url.path)"
        case .failed(let error): "failed: \(error.description)"
        }
    }

    /// One NDJSON object; every line has the same keys, absent values are null.
    func jsonLine(_ download: Download, event: String, progress: DownloadProgress, detail: DownloadEvent? = nil) -> String {
        var offset: JSONValue = .null
        var delay: JSONValue = .null
        var reason: JSONValue = .null
        var error: DownloadError?
        switch detail {
        case .resumed(let at)?: offset = .integer(Int(at))
        case .restartedFromZero(let why)?: reason = .string(why)
        case .retrying(let after, let failure)?:
            delay = .integer(Int(after.components.seconds * 1000 + after.components.attoseconds / 1_000_000_000_000_000))
            error = failure
        case .failed(let failure)?: error = failure
        default: break
        }
        let object = JSONValue.object([
            "time": .string(Timestamp.iso8601(context.now())),
            "id": .string(download.id.uuidString.lowercased()),
            "url": .string(download.url.absoluteString),
            "file": .string(download.destination.path),
            "event": .string(event),
            "offset": offset,
            "bytes": .integer(Int(progress.bytesReceived)),
            "total": progress.totalBytes.map { .integer(Int($0)) } ?? .null,
            "bytesPerSecond": .integer(Int(progress.bytesPerSecond)),
            "retryDelayMilliseconds": delay,
            "reason": reason,
            "errorCode": error.map { .integer($0.errorCode) } ?? .null,
            "httpStatus": error?.httpStatusCode.map { .integer($0) } ?? .null,
            "message": .string(error?.description),
        ])
        return object.serialized
    }

    // MARK: bars

    /// `name  [#####-----]  45%  12.0 MiB / 40.0 MiB  2.1 MiB/s  ETA 0:13`, fitted to the terminal.
    func bar(_ download: Download) -> String {
        let progress = download.progress
        let width = max(40, Self.terminalColumns())
        let name = String(download.destination.lastPathComponent.prefix(24))
        var status: String
        switch download.state {
        case .waitingForConnectivity: status = color("waiting for network", code: 33)
        case .paused: status = "paused"
        case .completed: status = "done"
        case .failed: status = color("failed", code: 31)
        case .queued: status = "queued"
        case .running:
            status = "\(Self.bytes(Double(progress.bytesPerSecond)))/s"
            if let eta = progress.estimatedTimeRemaining { status += "  ETA \(Self.clock(eta))" }
        }
        let amount = Self.bytes(Double(progress.bytesReceived)) + (progress.totalBytes.map { " / " + Self.bytes(Double($0)) } ?? "")
        let percent = progress.fractionCompleted.map { TextFormat.rightAligned("\(Int($0 * 100))%", width: 4) } ?? "  ?%"
        let fixed = name.count + percent.count + amount.count + status.count + 12
        let cells = max(10, min(40, width - fixed))
        let filled = Int((progress.fractionCompleted ?? 0) * Double(cells))
        let track = String(repeating: "#", count: filled) + String(repeating: "-", count: cells - filled)
        return "\(name)  [\(track)] \(percent)  \(amount)  \(status)"
    }

    private func color(_ text: String, code: Int) -> String {
        usesColor ? "\u{1B}[\(code)m\(text)\u{1B}[0m" : text
    }

    /// Moves up over `lines` previously drawn bar lines and clears to the end of the screen.
    private func erase(_ lines: Int) -> String {
        lines == 0 ? "" : "\u{1B}[\(lines)A\r\u{1B}[J"
    }

    static func terminalColumns() -> Int {
        var size = winsize()
        guard ioctl(2, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 else { return 80 }
        return Int(size.ws_col)
    }

    /// 1024-based units, one decimal: `12.0 MiB`.
    static func bytes(_ value: Double) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var amount = value
        var unit = 0
        while amount >= 1024, unit < units.count - 1 { amount /= 1024; unit += 1 }
        return unit == 0 ? "\(Int(amount)) B" : "\(TextFormat.decimal(amount, fractionDigits: 1)) \(units[unit])"
    }

    /// `0:13`, `1:02:03`.
    static func clock(_ duration: Duration) -> String {
        let total = Int(duration.components.seconds)
        let (hours, minutes, seconds) = (total / 3600, total / 60 % 60, total % 60)
        let tail = "\(TextFormat.zeroPadded(minutes, width: hours > 0 ? 2 : 1)):\(TextFormat.zeroPadded(seconds, width: 2))"
        return hours > 0 ? "\(hours):\(tail)" : tail
    }

    static func seconds(_ duration: Duration) -> String {
        let value = Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
        return value < 1 ? "\(Int(value * 1000)) ms" : "\(TextFormat.decimal(value, fractionDigits: 1)) s"
    }
}
