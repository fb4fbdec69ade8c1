/// When to push a partial file's dirty pages to the disk while the download runs.
///
/// Without it the kernel writes nothing back until its dirty thresholds (10% of memory by
/// default), and the fsync at completion writes the whole file after the transfer, which made
/// `download` 1.3-1.4x curl's time to disk. With it, write-back of each `window` starts as soon
/// as the window is full (sync_file_range WRITE); once more than `depth` windows are in flight,
/// the oldest is waited for. So at most about `depth + 1` windows are dirty, the disk works while
/// the network does, and a checkpoint's or completion's fsync has little left. The wait falls on
/// a window started `depth` windows ago: it blocks only when the disk is slower than the network,
/// and then it is the backpressure that pauses the transfer. It is no durability barrier: fsync
/// stays that.
///
/// Pure: the owner applies the returned actions to the file (PartialFile, on its write queue).
struct WriteBackWindow: Sendable, Hashable {
    enum Action: Sendable, Hashable {
        /// Start write-back of the range, without waiting.
        case start(Range<Int64>)
        /// Wait until the range (started earlier) has reached the device.
        case wait(Range<Int64>)
    }

    /// Bytes per write-back request.
    let window: Int64
    /// Windows started and not yet waited for, at most.
    let depth: Int
    /// Write-back was started for bytes below this offset.
    private(set) var started: Int64
    /// Started ranges not yet waited for, oldest first.
    private(set) var inFlight: [Range<Int64>] = []

    init(window: Int64, depth: Int = 3, from offset: Int64 = 0) {
        self.window = max(1, window)
        self.depth = max(0, depth)
        started = offset
    }

    /// Bytes that may be dirty: written, and not yet waited for.
    func dirtyBytes(writtenEnd: Int64) -> Int64 { writtenEnd - (inFlight.first?.lowerBound ?? started) }

    /// The file now holds contiguous data up to `end`.
    mutating func written(upTo end: Int64) -> [Action] {
        guard end - started >= window else { return [] }
        var actions: [Action] = [.start(started..<end)]
        inFlight.append(started..<end)
        started = end
        while inFlight.count > depth {
            actions.append(.wait(inFlight.removeFirst()))
        }
        return actions
    }

    /// The file was truncated or rewritten from `offset` (a restart, a resume point): nothing
    /// past it is pending any more.
    mutating func reset(to offset: Int64) {
        started = offset
        inFlight = []
    }
}
