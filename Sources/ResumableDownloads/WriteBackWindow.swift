/// When to push a partial file's dirty pages to the disk while the download runs.
///
/// Without it the kernel writes nothing back until its dirty thresholds (10% of memory by
/// default), and the fsync at completion writes the whole file after the transfer, which made
/// `download` 1.3-1.4x curl's time to disk. With it, write-back of each `window` starts as soon
/// as the window is full (sync_file_range WRITE), and the window before it is waited for, so at
/// most about two windows are dirty, the disk works while the network does, and a checkpoint's
/// or completion's fsync has little left. It is no durability barrier: fsync stays that.
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
    /// Write-back was started for bytes below this offset.
    private(set) var started: Int64
    /// Write-back was waited for below this offset.
    private(set) var settled: Int64

    init(window: Int64, from offset: Int64 = 0) {
        self.window = max(1, window)
        started = offset
        settled = offset
    }

    /// The file now holds contiguous data up to `end`.
    mutating func written(upTo end: Int64) -> [Action] {
        guard end - started >= window else { return [] }
        var actions: [Action] = [.start(started..<end)]
        if started > settled { actions.append(.wait(settled..<started)) }
        settled = started
        started = end
        return actions
    }

    /// The file was truncated or rewritten from `offset` (a restart, a resume point): nothing
    /// past it is pending any more.
    mutating func reset(to offset: Int64) {
        started = offset
        settled = offset
    }
}
