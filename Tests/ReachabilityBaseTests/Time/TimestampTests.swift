import Foundation
import Testing
@testable import ReachabilityBase
import TestSupport

/// The hand-written ISO 8601 formatter (kept out of the binaries' link) against Foundation's.
@Suite("Timestamp")
struct TimestampTests {
    @Test func timestampMatchesFoundationsISO8601() {
        let style = Date.ISO8601FormatStyle(includingFractionalSeconds: true)
        // Seeded: a date that formats wrong replays.
        var generator = SplitMix(seed: 0x7157_A3F1)
        var dates = [Date(timeIntervalSince1970: 0), Date(timeIntervalSince1970: 1_700_000_000.999),
                     Date(timeIntervalSince1970: 951_782_400.5), Date(timeIntervalSince1970: 4_102_444_799.001)]
        for _ in 0..<200 { dates.append(Date(timeIntervalSince1970: Double.random(in: 0..<4_102_444_800, using: &generator))) }
        for date in dates {
            // Foundation truncates to milliseconds as well.
            #expect(Timestamp.iso8601(date) == style.format(date), "\(date.timeIntervalSince1970)")
        }
        #expect(Timestamp.iso8601(Date(timeIntervalSince1970: 1_700_000_000.25)) == "2023-11-14T22:13:20.250Z")
    }
}
