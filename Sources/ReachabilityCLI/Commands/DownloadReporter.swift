import FoundationEssentials
import LinuxReachability
import ResumableDownloads
import Synchronization
import ReachabilityBase
import LinuxSystem
import ReachabilityEvents

/// Turns download events and progress into output: NDJSON on stdout (`--json`) or text lines on
/// stderr, plus one progress bar per download on stderr when it is a terminal.
///
/// Event lines and bars share stderr, so every write goes through one lock: the bars are erased,
/// the line printed, the bars drawn again below it.
final class DownloadReporter: Sendable {
    private struct State {
        var drawnLines = 0
        var reportedBytes: [UUID: Int64] = [:]
        /// Downloads whose last event for this run (completed, failed, paused) was printed:
        /// nothing more is printed about them, progress included.
        var ended: Set<UUID> = []
        /// Downloads waiting for a server that does not answer (their state stays `running`).
        var waitingForServer: Set<UUID> = []
        /// The connections last reported per download (`connections` lines), and when.
        var reportedConnections: [UUID: (connections: DownloadConnections, at: ContinuousClock.Instant)] = [:]
    }

    private let context: CommandContext
    private let isJSON: Bool
    private let drawsProgress: Bool
    private let usesColor: Bool
    /// `--quiet`: no event lines and no bars; errors are still printed by the command.
    private let isQuiet: Bool
    /// `-o -`: the file waits in the state directory and goes to stdout once complete, so its
    /// path there is no place to look for it.
    private let writesToStandardOutput: Bool
    private let state = Mutex(State())

    /// The monitor's current path: a `waiting` download behind a captive portal says where to log in.
    private let currentPath: @Sendable () -> NetworkPath?

    init(context: CommandContext, isJSON: Bool, drawsProgress: Bool, usesColor: Bool, isQuiet: Bool = false,
         writesToStandardOutput: Bool = false, currentPath: @escaping @Sendable () -> NetworkPath? = { nil }) {
        self.writesToStandardOutput = writesToStandardOutput
        self.currentPath = currentPath
        self.context = context
        self.isJSON = isJSON
        self.drawsProgress = drawsProgress && !isQuiet
        self.usesColor = usesColor
        self.isQuiet = isQuiet && !isJSON
    }

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
        guard drawsProgress || isJSON || !isQuiet else { return }
        var isLastFrame = false
        while true {
            let downloads = current()
            if !isLastFrame { reportConnections(of: downloads) }
            // The frame drawn after cancellation shows bars only: every download has had its last event.
            if isJSON && !isLastFrame {
                for download in downloads where download.state == .running {
                    let progress = download.progress
                    let line = EventSchema.downloadLine(.progress, EventSchema.DownloadFacts(download), at: context.now(),
                                                        EventSchema.progressFields(progress))
                    // Checked and written under the lock that `report` takes, so a progress line can
                    // never follow the download's last event.
                    state.withLock { state in
                        guard !state.ended.contains(download.id),
                              state.reportedBytes[download.id] != progress.bytesReceived else { return }
                        state.reportedBytes[download.id] = progress.bytesReceived
                        context.output.line(line)
                    }
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

    /// A `connections` line (JSON, or text when no bars are drawn) for each running download whose
    /// connections or paths changed; text lines at most once a second per download, so a ramp
    /// from one connection to several prints its result, not every step.
    private func reportConnections(of downloads: [Download]) {
        guard isJSON || !drawsProgress && !isQuiet else { return }
        let now = ContinuousClock.now
        for download in downloads where download.state == .running {
            let connections = download.progress.connections
            guard connections.count > 0 else { continue }
            let facts = EventSchema.DownloadFacts(download)
            let line = isJSON
                ? EventSchema.downloadLine(.connections, facts, at: context.now(), EventSchema.connectionFields(connections))
                : TerminalText.escaped("\(Timestamp.iso8601(context.now())) \(download.destination.lastPathComponent): \(EventSchema.connectionText(connections))")
            state.withLock { state in
                guard !state.ended.contains(download.id) else { return }
                let last = state.reportedConnections[download.id]
                guard last?.connections != connections else { return }
                if !isJSON, let last, now - last.at < .seconds(1) { return }
                state.reportedConnections[download.id] = (connections, now)
                if isJSON {
                    context.output.line(line)
                } else {
                    context.errorOutput.text(line + "\n")
                }
            }
        }
    }

    /// Leaves the last bars on screen and stops redrawing them.
    func finishProgress() {
        state.withLock { $0.drawnLines = 0 }
    }

    // MARK: events

    func report(_ event: DownloadEvent, of download: Download) {
        let name = EventSchema.describe(event).0
        state.withLock { state in
            switch event {
            case .waitingForServer: state.waitingForServer.insert(download.id)
            case .retrying: break
            default: state.waitingForServer.remove(download.id)
            }
        }
        if isJSON {
            let path = event == .waitingForConnectivity ? currentPath() : nil
            let line = EventSchema.downloadLine(event, EventSchema.DownloadFacts(download), at: context.now(), path: path)
            state.withLock { state in
                guard !state.ended.contains(download.id) else { return }
                if name.isTerminal { state.ended.insert(download.id) }
                context.output.line(line)
            }
            return
        }
        guard !isQuiet else { return }
        var words = Self.text(of: event)
        if event == .waitingForConnectivity, let portal = EventSchema.portal(of: currentPath()) {
            words = portal.isEmpty ? "waiting for login (NetworkManager found a captive portal)" : "waiting for login at \(PathText.escaped(portal))"
        }
        if case .completed = event, writesToStandardOutput { words = "completed and verified; writing it to stdout" }
        let line = TerminalText.escaped("\(Timestamp.iso8601(context.now())) \(download.destination.lastPathComponent): \(words)")
        state.withLock { state in
            // Erase the bars, print the event above where they were; the next tick redraws them.
            context.errorOutput.text(erase(state.drawnLines) + line + "\n")
            state.drawnLines = 0
        }
    }

    /// A destination that already held the verified file: a `completed` event without a transfer.
    func reportAlreadyComplete(_ job: DownloadCommand.Job, reason: String) {
        if isJSON {
            let size = (try? FileManager.default.attributesOfItem(atPath: job.destination.path)[.size] as? Int).map(Int64.init)
            let facts = EventSchema.DownloadFacts(id: nil, url: URLRedaction.redacted(job.url), file: job.destination.path,
                                                  bytes: size, total: size)
            context.output.line(EventSchema.downloadLine(.completed, facts, at: context.now(),
                                                         [.init(key: "reason", value: .string(reason))]))
        } else if !isQuiet {
            let line = TerminalText.escaped("\(Timestamp.iso8601(context.now())) \(job.destination.lastPathComponent): \(reason)")
            state.withLock { state in
                context.errorOutput.text(erase(state.drawnLines) + line + "\n")
                state.drawnLines = 0
            }
        }
    }

    /// A rerun with a new URL found bytes stored from another one (text only: the `resumed` or
    /// `restarted` event that follows says, in `--json` too, whether they were kept).
    func reportNewURL(_ job: DownloadCommand.Job, previous: URL) {
        guard !isJSON, !isQuiet else { return }
        let line = TerminalText.escaped("\(Timestamp.iso8601(context.now())) \(job.destination.lastPathComponent): continuing the bytes "
            + "stored from \(URLRedaction.redacted(previous)) with the new URL if its length and validator match, else starting over")
        state.withLock { state in
            context.errorOutput.text(erase(state.drawnLines) + line + "\n")
            state.drawnLines = 0
        }
    }

    /// A job left a mirror for the next (`MirrorFailover`): the `sourceChanged` event, whose
    /// `url` is the new source.
    func reportSourceChange(_ download: Download, from previous: URL, reason: String) {
        if isJSON {
            let line = EventSchema.downloadLine(.sourceChanged, EventSchema.DownloadFacts(download), at: context.now(),
                                                [.init(key: "from", value: .string(URLRedaction.redacted(previous))),
                                                 .init(key: "reason", value: .string(reason))])
            state.withLock { _ in context.output.line(line) }
            return
        }
        guard !isQuiet else { return }
        let line = TerminalText.escaped("\(Timestamp.iso8601(context.now())) \(download.destination.lastPathComponent): left "
            + "\(URLRedaction.redacted(previous)) (\(reason)); continuing from \(URLRedaction.redacted(download.url))")
        state.withLock { state in
            context.errorOutput.text(erase(state.drawnLines) + line + "\n")
            state.drawnLines = 0
        }
    }

    /// The event as words for a text line.
    static func text(of event: DownloadEvent) -> String {
        switch event {
        case .started: "started"
        case .resumed(let offset): "resumed at byte \(offset)"
        case .waitingForConnectivity: "waiting for network"
        case .waitingForServer(let error): "waiting for server: \(error.description)"
        case .waiting(let reason): "waiting: \(reason)"
        case .restartedFromZero(let reason): "restarted from zero: \(reason)"
        case .retrying(let delay, let error): "retrying in \(seconds(delay)): \(error.description)"
        case .paused: "paused"
        case .completed(let url): "completed: \(url.path)"
        case .failed(let error): "failed: \(error.description)"
        case .sourceDropped(let source, let reason): "dropped mirror \(URLRedaction.redacted(source)): \(reason)"
        }
    }

    // MARK: bars

    /// `name  [#####-----]  45%  12.0 MiB / 40.0 MiB  2.1 MiB/s  ETA 0:13`, fitted to the terminal.
    func bar(_ download: Download) -> String {
        let progress = download.progress
        let width = max(40, Self.terminalColumns())
        let name = String(download.destination.lastPathComponent.prefix(24))
        var status: String
        switch download.state {
        case .waitingForConnectivity:
            status = color(EventSchema.portal(of: currentPath()) != nil ? "waiting for login" : "waiting for network", code: 33)
        case .paused: status = "paused"
        case .completed: status = "done"
        case .failed: status = color("failed", code: 31)
        case .queued: status = "queued"
        case .running where state.withLock({ $0.waitingForServer.contains(download.id) }):
            status = color("waiting for server", code: 33)
        case .running:
            status = "\(Self.bytes(Double(progress.bytesPerSecond)))/s"
            if let eta = progress.estimatedTimeRemaining { status += "  ETA \(Self.clock(eta))" }
            status += Self.connectionBadge(progress.connections)
        }
        let amount = Self.bytes(Double(progress.bytesReceived)) + (progress.totalBytes.map { " / " + Self.bytes(Double($0)) } ?? "")
        let percent = progress.fractionCompleted.map { TextFormat.rightAligned("\(Int($0 * 100))%", width: 4) } ?? "  ?%"
        let fixed = name.count + percent.count + amount.count + status.count + 12
        let cells = max(10, min(40, width - fixed))
        let filled = Int((progress.fractionCompleted ?? 0) * Double(cells))
        let track = String(repeating: "#", count: filled) + String(repeating: "-", count: cells - filled)
        return "\(name)  [\(track)] \(percent)  \(amount)  \(status)"
    }

    /// `  x6` for several connections; `  x6 eth0:4+wlan0:2` when they use several paths; nothing
    /// for one connection on the routing table's path (how every download looked before).
    static func connectionBadge(_ connections: DownloadConnections) -> String {
        let named = connections.paths.compactMap { path in path.interface.map { "\($0):\(path.connections)" } }
        if named.count > 1 { return "  x\(connections.count) " + named.joined(separator: "+") }
        if connections.count > 1 { return "  x\(connections.count)" }
        return ""
    }

    private func color(_ text: String, code: Int) -> String {
        usesColor ? "\u{1B}[\(code)m\(text)\u{1B}[0m" : text
    }

    /// Moves up over `lines` previously drawn bar lines and clears to the end of the screen.
    private func erase(_ lines: Int) -> String {
        lines == 0 ? "" : "\u{1B}[\(lines)A\r\u{1B}[J"
    }

    static func terminalColumns() -> Int {
        FileDescriptor.standardError.terminalColumns ?? 80
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
        let value = duration.timeInterval
        return value < 1 ? "\(Int(value * 1000)) ms" : "\(TextFormat.decimal(value, fractionDigits: 1)) s"
    }
}
