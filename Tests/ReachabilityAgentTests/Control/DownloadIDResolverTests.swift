import Foundation
import LinuxReachability
import ResumableDownloads
import Synchronization
import Testing
@testable import ReachabilityAgent
import TestSupport

/// Full IDs and unique prefixes, like git's short hashes.
@Suite("Download IDs")
struct DownloadIDResolverTests {
    @Test func resolvesIDPrefixes() throws {
        let a = UUID(uuidString: "1F2E3D4C-0000-0000-0000-000000000001")!
        let b = UUID(uuidString: "1F2E9999-0000-0000-0000-000000000002")!
        #expect(try DownloadIDResolver.resolve("1f2e3", among: [a, b]).get() == a)
        #expect(try DownloadIDResolver.resolve(a.uuidString.lowercased(), among: [a, b]).get() == a)
        #expect(throws: ControlError.ambiguous("1f2e")) { try DownloadIDResolver.resolve("1f2e", among: [a, b]).get() }
        #expect(throws: ControlError.notFound("77")) { try DownloadIDResolver.resolve("77", among: [a, b]).get() }
    }
}
