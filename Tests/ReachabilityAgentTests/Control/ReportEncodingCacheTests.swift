import Foundation
import Testing
@testable import ReachabilityAgent

/// `queue list` lines built from cached report encodings are the lines encoding the whole
/// response gives, before and after reports change.
@Suite("List encoding cache")
struct ReportEncodingCacheTests {
    static func report(_ index: Int, state: AgentDownload.State = .queued, bytes: Int64 = 0) -> AgentDownload {
        AgentDownload(id: String(format: "%08x-0000-4000-8000-000000000000", index), url: "http://h/f\(index)?q=\"x\"/é",
                      destination: "/tmp/f\(index).bin", state: state, bytesReceived: bytes, totalBytes: index.isMultiple(of: 2) ? 4096 : nil,
                      bytesPerSecond: 0, error: state == .failed ? "HTTP 404\n" : nil, priority: "normal",
                      connections: index.isMultiple(of: 3) ? 2 : nil, allowsConstrained: index.isMultiple(of: 5) ? false : nil)
    }

    @Test func cachedLinesAreTheWholeEncoding() {
        let cache = ReportEncodingCache()
        var downloads = (0..<50).map { Self.report($0) }
        for round in 0..<3 {
            let response = ControlResponse.success(id: .number(round), downloads: downloads)
            #expect(cache.encode(response) == ControlCodec.encode(response), "round \(round)")
            downloads[round * 7] = Self.report(round * 7, state: .running, bytes: Int64(round + 1) * 1000)
            downloads[round * 7 + 1] = Self.report(round * 7 + 1, state: .failed)
            downloads.removeLast()
        }
        let empty = ControlResponse.success(id: nil, downloads: [])
        #expect(cache.encode(empty) == ControlCodec.encode(empty))
        let status = ControlResponse.failure(.failed("x"), id: .text("s"))
        #expect(cache.encode(status) == ControlCodec.encode(status))
    }
}
