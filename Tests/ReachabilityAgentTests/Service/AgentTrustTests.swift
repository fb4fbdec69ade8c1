import TestSupport
import Foundation
import ResumableDownloads
import Testing
@testable import ReachabilityAgent
import ReachabilityAgent
@testable import ReachabilityEvents

/// The agent's defences that need no socket: where queued files may go, and who may hold
/// control connections.
@Suite("Agent destinations and control admission")
struct AgentTrustTests {
    @Test(arguments: [
        ("http://h/..%2F..%2F..%2Fetc%2Fpasswd", "passwd"),
        ("http://h/a%0Ab%1Bc.txt", "a_b_c.txt"),
        ("http://h/.bashrc", "bashrc"),
        ("http://h/...", "index.html"),
        ("http://h/", "index.html"),
        ("http://h/dir/file.iso?x=1", "file.iso"),
        ("http://h/%2E%2E", "index.html"),
        ("http://h/back%5Cslash", "back_slash"),
        ("http://h/e%CC%81t%C3%A9", "e\u{301}té"),
        ("http://h/rtl%E2%80%AEgpj.exe", "rtl_gpj.exe"),
    ])
    func namesFromURLsAreSanitized(_ url: String, _ expected: String) throws {
        let name = AgentDestination.fileName(for: try #require(URL(string: url)))
        #expect(name == expected)
        #expect(!name.contains("/") && !name.hasPrefix(".") && name.utf8.count <= 200)
    }

    /// `%` and two hex digits only: a sign or one digit is no escape (`UInt8("+f", radix: 16)` is
    /// 15, and the name once decoded `%+f` to a control byte).
    @Test func onlyTwoHexDigitsArePercentDecoded() {
        #expect(AgentDestination.percentDecoded("a%2Eb%c3%a9") == "a.bé")
        #expect(AgentDestination.percentDecoded("a%+fb%-1c%1") == "a%+fb%-1c%1")
    }

    @Test func outputMustBeInAnAllowedDirectory() throws {
        let files = "/var/lib/reachability/files"
        let url = URL(string: "http://h/x.iso")!
        #expect(try AgentDestination.resolve(output: nil, url: url, filesDirectory: files, allowed: []).get() == files + "/x.iso")
        #expect(try AgentDestination.resolve(output: files + "/y.iso", url: url, filesDirectory: files, allowed: []).get() == files + "/y.iso")
        #expect(try AgentDestination.resolve(output: "/srv/dl/sub/y.iso", url: url, filesDirectory: files, allowed: ["/srv/dl"]).get()
                == "/srv/dl/sub/y.iso")
        for output in ["/etc/passwd", "/srv/dlx/y", files + "/../../../etc/shadow", files + "/./x", "relative/x", "/srv/dl",
                       files + "/x.part", files + "/a\nb"] {
            #expect(throws: ControlError.self, "\(output)") {
                try AgentDestination.resolve(output: output, url: url, filesDirectory: files, allowed: ["/srv/dl"]).get()
            }
        }
    }

    /// systemd's DynamicUser= makes /var/lib/reachability a link to /var/lib/private/reachability;
    /// the unit's documented `queue add -o /var/lib/reachability/files/NAME` must work.
    @Test func outputThroughTheStateDirectorysOtherSpelling() throws {
        let files = "/var/lib/private/reachability/files"
        let aliases = ["/var/lib/reachability": "/var/lib/private/reachability"]
        let url = URL(string: "http://h/x.iso")!
        func resolve(_ output: String) throws -> String {
            try AgentDestination.resolve(output: output, url: url, filesDirectory: files, allowed: [], aliases: aliases).get()
        }
        #expect(try resolve("/var/lib/reachability/files/NAME") == files + "/NAME")
        #expect(try resolve("/var/lib/reachability/files/sub/NAME") == files + "/sub/NAME")
        #expect(try resolve(files + "/NAME") == files + "/NAME")
        for output in ["/var/lib/reachability/NAME", "/var/lib/reachabilityX/files/NAME", "/var/lib/reachability/files/../../x",
                       "/var/lib/reachability", "/var/lib/reachability/files"] {
            #expect(throws: ControlError.self, "\(output)") { try resolve(output) }
        }
        #expect(AgentDestination.respelled("/var/lib/reachability", aliases: aliases) == "/var/lib/private/reachability")
        #expect(AgentDestination.respelled("/var/lib/reachability2/x", aliases: aliases) == "/var/lib/reachability2/x")
    }

    /// Paths are compared as bytes: `e` + U+0301 is another directory on disk than `é`, though
    /// Swift's `String` calls them equal.
    @Test func canonicallyEquivalentSpellingsAreOtherDirectories() throws {
        let url = URL(string: "http://h/x.iso")!
        let precomposed = "/srv/caf\u{E9}", decomposed = "/srv/cafe\u{301}"
        #expect(throws: ControlError.self) {
            try AgentDestination.resolve(output: decomposed + "/x", url: url, filesDirectory: "/state/files", allowed: [precomposed]).get()
        }
        #expect(try AgentDestination.resolve(output: precomposed + "/x", url: url, filesDirectory: "/state/files",
                                             allowed: [precomposed]).get() == precomposed + "/x")
        #expect(AgentDestination.respelled(decomposed + "/files/x", aliases: [precomposed: "/real"]) == decomposed + "/files/x")
    }

    @Test func agentConfListsDownloadDirectories() throws {
        let base = AgentSettings(maximumConcurrentDownloads: 4, allowsExpensive: true)
        let parsed = try AgentSettings.parse("download-dir=/srv/dl\ndownload-dir = /media/usb/\n", base: base, path: "agent.conf")
        #expect(parsed.downloadDirectories == ["/srv/dl", "/media/usb"])
        for line in ["download-dir=relative", "download-dir=/srv/../etc", "download-dir="] {
            #expect(throws: AgentFailure.self, "\(line)") { try AgentSettings.parse(line, base: base, path: "agent.conf") }
        }
    }

    @Test func onlyTheLimitPerUserAndRootKeepsAReservedSlot() {
        var admission = ControlAdmission(perUser: 3, shared: 4, reservedForRoot: 2)
        for _ in 0..<3 { let admitted = admission.admit(uid: 1000); #expect(admitted) }
        var admitted = admission.admit(uid: 1000)
        #expect(!admitted, "one user's share is used up")
        admitted = admission.admit(uid: 1001)
        #expect(admitted)
        admitted = admission.admit(uid: 1002)
        #expect(!admitted, "the shared pool is full")
        let first = admission.admit(uid: 0), second = admission.admit(uid: 0)
        #expect(first && second, "root keeps its reserved slots")
        admitted = admission.admit(uid: 0)
        #expect(!admitted)
        admission.release(uid: 1000)
        admitted = admission.admit(uid: 1002)
        #expect(admitted)
        admission.release(uid: 0)
        admitted = admission.admit(uid: 0)
        #expect(admitted)
    }

    /// Attached sessions leave the request slots: a program holding sessions still gets its
    /// `queue list` answered, and one uid cannot hold more than its share of either.
    @Test func attachedConnectionsHaveSlotsOfTheirOwn() {
        var admission = ControlAdmission()
        admission.attachedPerUser = 2
        var admitted = (0..<16).map { _ in admission.admit(uid: 1000) }
        #expect(admitted.allSatisfy { $0 })
        let seventeenth = admission.admit(uid: 1000)
        #expect(!seventeenth)
        let promoted = [admission.promote(uid: 1000), admission.promote(uid: 1000)]
        #expect(promoted == [true, true])
        admitted = [admission.admit(uid: 1000), admission.admit(uid: 1000)]
        #expect(admitted == [true, true], "promoted connections gave their request slots back")
        let third = admission.promote(uid: 1000)
        #expect(!third, "at most attachedPerUser")
        admission.release(uid: 1000, attached: true)
        let again = admission.promote(uid: 1000)
        #expect(again)
    }

    @Test func theConnectionMachineKnowsWhenARequestIsUnderway() {
        var machine = ControlConnectionStateMachine()
        #expect(!machine.isInsideRequest)
        _ = machine.received(Array("{\"vers".utf8))
        #expect(machine.isInsideRequest)
        _ = machine.received(Array("ion\":1,\"command\":\"list\"}\n".utf8))
        #expect(!machine.isInsideRequest)
    }

    /// Bounded, seeded fuzzing of the control protocol: random and mutated request bytes never
    /// crash the connection machine, and it never hands on a command that failed validation.
    @Test(arguments: [11 as UInt64, 12, 13])
    func fuzzedRequestsNeverCrashTheProtocol(seed: UInt64) {
        var random = SplitMix(seed: seed)
        let seeds = [#"{"version":1,"id":1,"command":"add","url":"http://h/x","output":"/srv/x","sha256":null}"#,
                     #"{"version":1,"id":"a","command":"pause","download":"abc"}"#, #"{"version":1,"command":"list"}"#]
        var machine = ControlConnectionStateMachine(maximumLineLength: 4096)
        for _ in 0..<3000 {
            var bytes = Array(seeds[Int(random.next() % UInt64(seeds.count))].utf8)
            for _ in 0..<Int(random.next() % 4) {
                let position = Int(random.next() % UInt64(bytes.count + 1))
                switch random.next() % 3 {
                case 0: bytes.insert(UInt8(truncatingIfNeeded: random.next()), at: position)
                case 1: if position < bytes.count { bytes.remove(at: position) }
                default: bytes.insert(contentsOf: Array(#"\u0000"\n{}[]"#.utf8), at: position)
                }
            }
            bytes.append(10)
            for action in machine.received(bytes) {
                if case .handle(_, let command) = action, case .add(let url, let output, let sha256, _, _, _) = command {
                    #expect(["http", "https"].contains(url.scheme?.lowercased() ?? ""))
                    #expect(output.map { $0.hasPrefix("/") } ?? true)
                    #expect(sha256.map { SHA256.normalizedHexDigest($0) == $0 } ?? true)
                }
            }
        }
        let last = machine.endOfInput().last
        #expect(last == .close)
    }
}

