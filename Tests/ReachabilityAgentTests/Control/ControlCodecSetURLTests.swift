import Foundation
import Testing
@testable import ReachabilityAgent

/// `setURL` lines (issue 34, `queue set-url`): a download ID and an http(s) URL, nothing else.
@Suite("Control protocol lines: setURL")
struct ControlCodecSetURLTests {
    @Test func decodesAndRoundTrips() throws {
        let line = #"{"version":1,"id":4,"command":"setURL","download":"1f2e","url":"https://h/x?token=2"}"#
        let (id, command) = try ControlCodec.decodeRequest(Array(line.utf8)).get()
        #expect(id == .number(4))
        #expect(command == .setURL("1f2e", url: URL(string: "https://h/x?token=2")!))
        let encoded = ControlCodec.encode(ControlRequest(id: .number(9), command: command))
        #expect(try ControlCodec.decodeRequest(encoded).get().1 == command)
    }

    @Test(arguments: [
        #"{"version":1,"command":"setURL","url":"http://h/x"}"#,
        #"{"version":1,"command":"setURL","download":"","url":"http://h/x"}"#,
        #"{"version":1,"command":"setURL","download":"1f2e"}"#,
        #"{"version":1,"command":"setURL","download":"1f2e","url":"ftp://h/x"}"#,
        #"{"version":1,"command":"setURL","download":"1f2e","url":"http:///x"}"#,
    ])
    func refusesAnythingElse(line: String) {
        switch ControlCodec.decodeRequest(Array(line.utf8)) {
        case .success(let value): Issue.record("accepted \(value)")
        case .failure(let rejection): #expect(rejection.error.code == .invalidArgument, "\(rejection.error.message)")
        }
    }
}
