import Foundation
import LinuxReachability
import Testing
@testable import ResumableDownloads

/// The free-space rule (issue 32 item 4) and the one typed wait reason, without a disk.
@Suite("Space policy and wait reasons")
struct SpacePolicyTests {
    static let gib: Int64 = 1 << 30
    static let mib: Int64 = 1 << 20

    @Test func theDefaultKeepsTheLargerOfOneGiBAndFivePercent() {
        let standard = MinimumFreeSpace.standard
        #expect(standard.bytes(onFileSystemOf: 10 * Self.gib) == Self.gib, "5 % of 10 GiB is under 1 GiB")
        #expect(standard.bytes(onFileSystemOf: 100 * Self.gib) == 5 * Self.gib)
        #expect(standard.bytes(onFileSystemOf: 0) == Self.gib)
        #expect(MinimumFreeSpace(bytes: 0, percent: 10).bytes(onFileSystemOf: 1000) == 100)
        #expect(MinimumFreeSpace(bytes: -5, percent: 400) == MinimumFreeSpace(bytes: 0, percent: 50), "bounded")
    }

    @Test func aDownloadWaitsWhenItWouldLeaveLessThanTheMinimum() {
        let policy = SpacePolicy(minimumFree: MinimumFreeSpace(bytes: Self.gib))
        // 3 GiB free, 1 GiB still to write: 2 GiB would be left.
        #expect(policy.waitReason(available: 3 * Self.gib, total: 100 * Self.gib, stillNeeded: Self.gib) == nil)
        // Exactly the minimum left is allowed.
        #expect(policy.waitReason(available: 2 * Self.gib, total: 100 * Self.gib, stillNeeded: Self.gib) == nil)
        // One byte short.
        #expect(policy.waitReason(available: 2 * Self.gib - 1, total: 100 * Self.gib, stillNeeded: Self.gib)
                == .lowDiskSpace(free: 2 * Self.gib - 1, needed: 2 * Self.gib))
        // Unknown length (0 still needed): only the minimum counts.
        #expect(policy.waitReason(available: Self.gib * 8 / 10, total: 10 * Self.gib, stillNeeded: 0)
                == .lowDiskSpace(free: Self.gib * 8 / 10, needed: Self.gib))
        // What the running downloads on that file system still write is reserved.
        #expect(policy.waitReason(available: 3 * Self.gib, total: 100 * Self.gib, stillNeeded: Self.gib, reserved: Self.gib) == nil)
        #expect(policy.waitReason(available: 3 * Self.gib - 1, total: 100 * Self.gib, stillNeeded: Self.gib, reserved: Self.gib)
                == .lowDiskSpace(free: 3 * Self.gib - 1, needed: 3 * Self.gib))
        // Hostile sizes saturate instead of trapping.
        #expect(policy.waitReason(available: .max, total: .max, stillNeeded: .max, reserved: .max) == nil)
        #expect(policy.waitReason(available: -1, total: -1, stillNeeded: -1) == .lowDiskSpace(free: 0, needed: Self.gib))
    }

    @Test func minFreeSpaceParsesOnceIntoBoundedValues() {
        let text = MinimumFreeSpace.Text()
        #expect(text.value(from: "2g") == MinimumFreeSpace(bytes: 2 * Self.gib))
        #expect(text.value(from: "500m") == MinimumFreeSpace(bytes: 500 * Self.mib))
        #expect(text.value(from: "0") == MinimumFreeSpace(bytes: 0))
        #expect(text.value(from: "10%") == MinimumFreeSpace(bytes: 0, percent: 10))
        for bad in ["51%", "-1", "1.5%", "%", "1x", "", " 2g", "2049t", "99999999999999999999999", "nan", "inf%"] {
            #expect(text.value(from: bad) == nil, "\(bad)")
        }
    }

    @Test func reasonsReadTheSameEverywhere() {
        #expect(JobWaitReason.onBattery.description == "on battery")
        #expect(JobWaitReason.lowDiskSpace(free: 860_000_000, needed: Self.gib).description == "0.8 GiB free, needs 1 GiB")
        #expect(JobWaitReason.lowDiskSpace(free: 300, needed: 600).description == "300 B free, needs 600 B")
        #expect(JobWaitReason.lowDiskSpace(free: 50 * Self.gib, needed: 1 << 60).description == "50 GiB free, needs 1048576 TiB")
        #expect(JobWaitReason.lowDiskSpace(free: 0, needed: Self.gib).description == "0 GiB free, needs 1 GiB")
        #expect(JobWaitReason.lowDiskSpace(free: 5 * Self.mib, needed: 20 * Self.mib).description == "5 MiB free, needs 20 MiB")
        #expect(JobWaitReason.notBefore(Date(timeIntervalSince1970: 0)).description.contains("earliestBeginDate"))
        #expect(JobWaitReason.timeWindow("09:00-17:00 limit 2 MiB/s").description == "09:00-17:00 limit 2 MiB/s")
        #expect(Set(JobWaitReason.Kind.allCases.map(\.rawValue)).count == JobWaitReason.Kind.allCases.count)
        #expect(JobWaitReason.lowDiskSpace(free: 1, needed: 2).kind == .lowDiskSpace)
        #expect(JobWaitReason.binaryBytes(-4) == "0 B")
        #expect(JobWaitReason.binaryBytes(Int64.max) == "8388607.9 TiB")
        #expect(JobWaitReason.forPath(nil, allowsExpensive: false, allowsConstrained: false) == .noPath)
    }
}
