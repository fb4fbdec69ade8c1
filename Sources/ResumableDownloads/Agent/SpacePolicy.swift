import ReachabilityBase

/// The free space a download must leave on the file system it writes to: the larger of a
/// number of bytes and a share of the file system (`min-free-space=` in agent.conf; by default
/// the larger of 1 GiB and 5 %, as a disk-filling download is the failure users meet, and 5 % is
/// what ext4 keeps back for root).
public struct MinimumFreeSpace: Sendable, Hashable, CustomStringConvertible {
    /// At least this many bytes.
    public var bytes: Int64
    /// At least this share of the file system's size, in percent (0-50).
    public var percent: Int

    /// The larger of `bytes` and `percent` % of the file system.
    public init(bytes: Int64, percent: Int = 0) {
        self.bytes = max(0, bytes)
        self.percent = min(50, max(0, percent))
    }

    /// The larger of 1 GiB and 5 % of the file system.
    public static let standard = MinimumFreeSpace(bytes: 1 << 30, percent: 5)

    /// The bytes to keep free on a file system of `totalBytes`.
    public func bytes(onFileSystemOf totalBytes: Int64) -> Int64 {
        max(bytes, max(0, totalBytes) / 100 * Int64(percent))
    }

    /// `2 GiB`, `10%`, or `1 GiB or 5%, the larger`.
    public var description: String {
        switch (bytes, percent) {
        case (_, 0): JobWaitReason.binaryBytes(bytes)
        case (0, _): "\(percent)%"
        default: "\(JobWaitReason.binaryBytes(bytes)) or \(percent)%, the larger"
        }
    }

    /// `min-free-space=`'s text: bytes (`2g`, `500m`, `0`) or a share of the file system
    /// (`10%`, 0-50).
    package struct Text: TextValueKind {
        package init() {}

        package var expectation: String {
            "a number of bytes (k, m, g, t: 1024-based) from 0 to 1024t, or a share of the file system from 0% to 50%"
        }

        package func value(from text: String) -> MinimumFreeSpace? {
            if text.hasSuffix("%") {
                return Count(0...50).value(from: String(text.dropLast())).map { MinimumFreeSpace(bytes: 0, percent: $0) }
            }
            return ByteCount(0...(1 << 50)).value(from: text).map { MinimumFreeSpace(bytes: $0) }
        }
    }
}

/// Whether a download may write now without leaving less than `minimumFree` on its file
/// system (issue 32 item 4). Pure: the agent reads statvfs(3) and the download's sizes, this
/// decides, and tests give it numbers. A download that breaks the rule, or meets `ENOSPC`,
/// waits in line with the reason (`JobWaitReason.lowDiskSpace`) instead of failing, and is
/// looked at again every `recheckInterval` (nothing on disk is dropped meanwhile).
public struct SpacePolicy: Sendable, Hashable {
    /// What to leave free.
    public var minimumFree: MinimumFreeSpace
    /// How often a waiting download (and a running one) is checked again.
    public var recheckInterval: Duration

    /// What a download of unknown length that met `ENOSPC` is taken to still need: it wrote as
    /// much as was free and more was wanted, and must not be started again into the same full
    /// disk at every check.
    public static let afterNoSpace: Int64 = 16 << 20

    /// A rule keeping `minimumFree` (by default the larger of 1 GiB and 5 %), checked every 2 s.
    public init(minimumFree: MinimumFreeSpace = .standard, recheckInterval: Duration = .seconds(2)) {
        self.minimumFree = minimumFree
        self.recheckInterval = recheckInterval
    }

    /// Why a download that still has `stillNeeded` bytes to write (0 when its length is not
    /// known yet) must wait on a file system with `available` of `total` bytes free, where the
    /// downloads already admitted still write `reserved`; nil when it may go on. It needs
    /// `stillNeeded + reserved + minimum` free (saturating).
    public func waitReason(available: Int64, total: Int64, stillNeeded: Int64, reserved: Int64 = 0) -> JobWaitReason? {
        var needed = minimumFree.bytes(onFileSystemOf: total)
        for term in [stillNeeded, reserved] {
            let (sum, overflow) = needed.addingReportingOverflow(max(0, term))
            needed = overflow ? .max : sum
        }
        return available >= needed ? nil : .lowDiskSpace(free: max(0, available), needed: needed)
    }
}
