import Foundation
import Testing
@testable import LinuxReachability

private func parse(_ text: String, bodyLimit: Int = 1, chunks: Int = 1, closed: Bool = true) -> ProbeResponseParser.Progress {
    var parser = ProbeResponseParser(bodyLimit: bodyLimit)
    let bytes = Array(text.utf8)
    let size = max(1, (bytes.count + chunks - 1) / chunks)
    var progress = ProbeResponseParser.Progress.needMore
    for start in stride(from: 0, to: bytes.count, by: size) {
        progress = parser.consume(bytes[start..<min(start + size, bytes.count)])
        if case .needMore = progress { continue }
        return progress
    }
    return closed ? parser.finish() : progress
}

private func response(_ progress: ProbeResponseParser.Progress) -> ProbeResponseParser.Response? {
    if case .complete(let response) = progress { return response }
    return nil
}

@Suite("Connectivity probe: HTTP answers")
struct ProbeResponseParserTests {
    @Test("complete answers, whatever the chunking of the bytes", arguments: [1, 2, 7, 1000])
    func chunkedDelivery(chunks: Int) throws {
        let noContent = try #require(response(parse("HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n", chunks: chunks)))
        #expect(noContent.status == 204 && noContent.bodyPrefix.isEmpty && noContent.isBodyComplete)
        let online = try #require(response(parse("HTTP/1.1 200 OK\r\nContent-Length: 24\r\n\r\nNetworkManager is online",
                                                 bodyLimit: 24, chunks: chunks)))
        #expect(String(decoding: online.bodyPrefix, as: UTF8.self) == "NetworkManager is online")
        let redirect = try #require(response(parse("HTTP/1.0 302 Found\nLocation: http://portal.example/login?x=1\n\n", chunks: chunks)))
        #expect(redirect.status == 302 && redirect.location == "http://portal.example/login?x=1")
        let chunked = try #require(response(parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n7\r\nNetwork\r\n3;x=y\r\nMan\r\n0\r\n\r\n",
                                                  bodyLimit: 32, chunks: chunks)))
        #expect(String(decoding: chunked.bodyPrefix, as: UTF8.self) == "NetworkMan" && chunked.isBodyComplete)
        let interim = try #require(response(parse("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n", chunks: chunks)))
        #expect(interim.status == 204)
    }

    @Test func decidesWithoutWaitingForTheWholeBody() throws {
        // A login page of a megabyte: the first byte is enough to tell it from an empty body.
        var parser = ProbeResponseParser(bodyLimit: 1)
        let progress = parser.consume(Array("HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\n\r\n<html>".utf8))
        let page = try #require(response(progress))
        #expect(page.bodyPrefix == Array("<".utf8) && !page.isBodyComplete)
        // Until close, without a length: an empty body is only known at the end.
        #expect(parse("HTTP/1.1 200 OK\r\n\r\n", closed: false) == .needMore)
        #expect(response(parse("HTTP/1.1 200 OK\r\n\r\n"))?.isBodyComplete == true)
    }

    @Test("hostile or broken answers are malformed, never a crash or an endless read", arguments: [
        "", "garbage\r\n\r\n", "HTTP/2 200\r\n\r\n", "HTTP/1.1 2000 OK\r\n\r\n", "HTTP/1.1 20x OK\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n", "HTTP/1.1 200 OK\r\n folded: x\r\n\r\n",
        "HTTP/1.1 200 OK\r\n: no name\r\n\r\n", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nabc\r\n", "HTTP/1.1 200 OK\r\nX",
        // Numbers read through HTTPWire: a sign, an exponent or a code below 100 is no number.
        "HTTP/1.1 +20 OK\r\n\r\n", "HTTP/1.1 -01 OK\r\n\r\n", "HTTP/1.1 099 OK\r\n\r\n", "HTTP/1.1 000 OK\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 1e3\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 9e18\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: inf\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: nan\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\nabc\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n+f\r\nabc\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x1\r\nabc\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n123456789\r\nabc\r\n",
    ])
    func malformed(text: String) {
        switch parse(text, bodyLimit: 2) {
        case .malformed: break
        case let other: Issue.record("expected malformed for \(text.debugDescription), got \(other)")
        }
    }

    @Test func endlessHeadersStopAtTheLimit() {
        var parser = ProbeResponseParser(bodyLimit: 1)
        var progress = parser.consume(Array("HTTP/1.1 200 OK\r\n".utf8))
        for _ in 0..<2000 where progress == .needMore {
            progress = parser.consume(Array("X-Filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n".utf8))
        }
        #expect(progress == .malformed("header section longer than 16 KiB"))
        #expect(parser.received.count <= ProbeResponseParser.maximumResponseBytes)
    }

    @Test("random bytes never crash the parser")
    func fuzz() {
        var generator = SystemRandomNumberGenerator()
        let pieces = ["HTTP/1.1 ", "200", " OK", "\r\n", "\n", "Content-Length: ", "5", "Transfer-Encoding: chunked",
                      "Location: /x", "0\r\n", "ff\r\n", "\r\n\r\n", ":", " ", "\u{0}", "a"]
        for _ in 0..<2000 {
            var text = ""
            for _ in 0..<Int.random(in: 0..<20, using: &generator) { text += pieces.randomElement(using: &generator)! }
            var parser = ProbeResponseParser(bodyLimit: Int.random(in: 0..<8, using: &generator))
            _ = parser.consume(Array(text.utf8))
            _ = parser.finish()
        }
    }
}

@Suite("Connectivity probe: classification and URLs")
struct ConnectivityClassifierTests {
    let probe = try! ProbeURL(parsing: "http://check.example:8080/nm?v=1")
    let url = "http://check.example:8080/nm?v=1"

    func classify(_ status: Int, location: String? = nil, body: String = "", complete: Bool = true,
                  expected: String = "") -> (Connectivity, String?) {
        let response = ProbeResponseParser.Response(status: status, location: location, bodyPrefix: Array(body.utf8),
                                                    isBodyComplete: complete)
        let result = ConnectivityClassifier.classify(response, expected: Array(expected.utf8), probe: probe, url: url)
        return (result.0, result.portalURL)
    }

    @Test func expectedAnswersAreFull() {
        #expect(classify(204) == (.full, nil))
        #expect(classify(200) == (.full, nil))  // "204 or no data", as NetworkManager
        #expect(classify(200, body: "NetworkManager is online\n", expected: "NetworkManager is online") == (.full, nil))
    }

    @Test func portalsAreRecognisedWithTheirURL() {
        #expect(classify(302, location: "http://portal.example/login") == (.portal, "http://portal.example/login"))
        #expect(classify(307, location: "/login") == (.portal, "http://check.example:8080/login"))
        #expect(classify(301, location: "welcome.html") == (.portal, "http://check.example:8080/welcome.html"))
        #expect(classify(302, location: "//portal.example/a") == (.portal, "http://portal.example/a"))
        #expect(classify(302) == (.portal, url))
        #expect(classify(302, location: "javascript:alert(1)") == (.portal, url))
        #expect(classify(302, location: "http://evil/\u{1B}[2J") == (.portal, url))
        #expect(classify(511) == (.portal, url))
        #expect(classify(200, body: "<html>login", complete: false) == (.portal, url))
        #expect(classify(200, body: "<html>", expected: "NetworkManager is online") == (.portal, url))
    }

    @Test func errorsAreLimited() {
        #expect(classify(404).0 == .limited)
        #expect(classify(503).0 == .limited)
        #expect(classify(500, body: "<html>oops", expected: "OK").0 == .limited)
    }

    func classify(_ text: String, expected: String) -> (Connectivity, String?) {
        guard let response = response(parse(text, bodyLimit: expected.utf8.count)) else { return (.unknown, "malformed") }
        let result = ConnectivityClassifier.classify(response, expected: Array(expected.utf8), probe: probe, url: url)
        return (result.0, result.portalURL)
    }

    @Test("NetworkManager's rules, from nm-connectivity.c")
    func networkManagerRules() {
        let nmDefault = "NetworkManager is online"
        // Ubuntu's connectivity-check.ubuntu.com: 204 and the status header, checked with NM's
        // default response text: the header decides, whatever the status and body.
        #expect(classify("HTTP/1.1 204 No Content\r\nX-NetworkManager-Status: online\r\n\r\n", expected: nmDefault) == (.full, nil))
        #expect(classify("HTTP/1.1 200 OK\r\nx-networkmanager-status: ONLINE\r\nContent-Length: 6\r\n\r\n<html>", expected: nmDefault) == (.full, nil))
        #expect(classify("HTTP/1.1 302 Found\r\nLocation: /x\r\nX-NetworkManager-Status: online\r\n\r\n", expected: "") == (.full, nil))
        // Only that exact line: another value, spacing or a bare LF is not the header.
        #expect(classify("HTTP/1.1 204 No Content\r\nX-NetworkManager-Status: offline\r\n\r\n", expected: nmDefault) == (.portal, url))
        #expect(classify("HTTP/1.1 204 No Content\r\nX-NetworkManager-Status:online\r\n\r\n", expected: nmDefault) == (.portal, url))
        #expect(classify("HTTP/1.1 204 No Content\nX-NetworkManager-Status: online\n\n", expected: nmDefault) == (.portal, url))
        #expect(classify("HTTP/1.1 204 No Content\r\nX-NetworkManager-Status: online-ish\r\n\r\n", expected: nmDefault) == (.portal, url))
        // Fedora's hotspot.txt: 200 "OK" (with a newline after it).
        #expect(classify("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nOK\n", expected: "OK") == (.full, nil))
        // An empty response= accepts 204 (with any body) and an empty 200; a 200 with content is a portal.
        #expect(classify("HTTP/1.1 204 No Content\r\n\r\n", expected: "") == (.full, nil))
        #expect(classify("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", expected: "") == (.full, nil))
        #expect(classify("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nlogin", expected: "") == (.portal, url))
        // A 204 where a text is expected, or a body that stops short of it: portal, as for NM.
        #expect(classify("HTTP/1.1 204 No Content\r\n\r\n", expected: nmDefault) == (.portal, url))
        #expect(classify("HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nNetwork", expected: nmDefault) == (.portal, url))
        // The expected text decides whatever the status.
        #expect(classify("HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\nOK", expected: "OK") == (.full, nil))
        // Redirects are never followed: the portal is where they point.
        #expect(classify("HTTP/1.1 302 Found\r\nLocation: http://portal.example/\r\nContent-Length: 0\r\n\r\n", expected: "OK")
                == (.portal, "http://portal.example/"))
    }

    @Test func theStatusHeaderDecidesWithoutTheBody() throws {
        var parser = ProbeResponseParser(bodyLimit: 24)
        let progress = parser.consume(Array("HTTP/1.1 200 OK\r\nX-NetworkManager-Status: online\r\nContent-Length: 99999\r\n\r\n".utf8))
        #expect(try #require(response(progress)).isMarkedOnline)
        // In an interim head too, as libcurl hands NetworkManager every header line.
        let interim = try #require(response(parse("HTTP/1.1 100 Continue\r\nX-NetworkManager-Status: online\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n")))
        #expect(interim.isMarkedOnline)
    }

    @Test("probe URLs: plain http only, nothing that could reach the request line", arguments: [
        ("http://192.0.2.1/", "192.0.2.1", 80, "/", "192.0.2.1"),
        ("http://[2001:db8::1]:8080", "2001:db8::1", 8080, "/", "[2001:db8::1]:8080"),
        ("HTTP://Check.Example/generate_204?x=1#frag", "Check.Example", 80, "/generate_204?x=1", "Check.Example"),
        ("http://a.example?q", "a.example", 80, "/?q", "a.example"),
    ] as [(String, String, UInt16, String, String)])
    func validURLs(text: String, host: String, port: UInt16, path: String, header: String) throws {
        let parsed = try ProbeURL(parsing: text)
        #expect(parsed.host == host && parsed.port == port && parsed.pathAndQuery == path && parsed.hostHeader == header)
        #expect(String(decoding: parsed.request(), as: UTF8.self).hasPrefix("GET \(path) HTTP/1.1\r\nHost: \(header)\r\n"))
    }

    @Test(arguments: ["https://check.example/", "ftp://x/", "http://", "http://user@host/", "http://host:0/",
                      "http://host:65536/", "http://host/a b", "http://host/\r\nX-Injected: 1", "http://[::1/",
                      "http://ho$t/", "check.example", "http://host:80x/",
                      // Ports read through HTTPWire: no sign, no exponent, nothing past 65535.
                      "http://host:+80/", "http://host:-1/", "http://host:1e3/", "http://host:000080/", "http://host:1e16/",
                      "http://host:9e18/", "http://host:1e300/", "http://host:inf/", "http://host:nan/", "http://host:/"])
    func invalidURLs(text: String) {
        #expect(throws: ReachabilityError.self) { try ProbeURL(parsing: text) }
    }

    @Test func httpsIsRefusedWithAReason() {
        do {
            _ = try ConnectivityCheck(url: "https://check.example/")
            Issue.record("https accepted")
        } catch {
            #expect("\(error)".contains("https is not supported"))
        }
    }
}

@Suite("Connectivity scheduling")
struct ConnectivitySchedulerTests {
    let check = try! ConnectivityCheck(url: "http://192.0.2.9/", interval: .seconds(300))
    let start = ContinuousClock.now
    let date = Date(timeIntervalSince1970: 1_796_018_400)

    func path(_ interface: String = "enp3s0", gateway: String = "10.0.0.1") -> NetworkPath {
        let nic = NetworkInterface(name: interface, index: 2, type: .wired, classificationReason: "test", isUp: true,
                                   hasCarrier: true, addresses: ["10.0.0.2"])
        return NetworkPath(status: .satisfied, unsatisfiedReason: nil, primaryInterface: nic,
                           routes: [PathRoute(family: .ipv4, interfaceName: interface, interfaceIndex: 2, gateway: gateway,
                                              sourceAddress: "10.0.0.2")], interfaces: [nic])
    }

    @Test func aPathChangeChecksAtOnceAndPublishesUnknownFirst() {
        var scheduler = ConnectivityScheduler(check: check)
        let actions = scheduler.pathChanged(path(), at: date)
        #expect(actions == [.start(id: 1, target: .init(routes: path().routes))])
        #expect(scheduler.apply(to: path()).connectivity == .unknown)
        #expect(scheduler.apply(to: path()).connectivityEvidence?.answer == "checking")
        // The same route again (another interface changed): no new check.
        #expect(scheduler.pathChanged(path(), at: date).isEmpty)
        let changed = scheduler.finished(id: 1, .init(connectivity: .full, answer: "HTTP 204"), at: start, date: date)
        #expect(changed)
        #expect(scheduler.apply(to: path()).connectivity == .full)
        #expect(scheduler.deadline == start + .seconds(300))
        #expect(scheduler.timerFired(at: start + .seconds(299)).isEmpty)
        #expect(scheduler.timerFired(at: start + .seconds(300)) == [.start(id: 2, target: .init(routes: path().routes))])
        // A repeated full answer is not a change (only the evidence is fresher).
        let repeated = scheduler.finished(id: 2, .init(connectivity: .full, answer: "HTTP 204"), at: start + .seconds(300), date: date)
        #expect(!repeated)
    }

    @Test("limited and portal back off from 1 s to 30 s; full resets it")
    func backoff() {
        var scheduler = ConnectivityScheduler(check: check)
        _ = scheduler.pathChanged(path(), at: date)
        var now = start
        var delays: [Duration] = []
        var id = 1
        for _ in 0..<7 {
            _ = scheduler.finished(id: id, .init(connectivity: .portal, portalURL: "http://p/", answer: "HTTP 302"), at: now, date: date)
            delays.append(scheduler.deadline! - now)
            now = scheduler.deadline!
            guard case .start(let next, _) = scheduler.timerFired(at: now).first else { Issue.record("no check"); return }
            id = next
        }
        #expect(delays == [.seconds(1), .seconds(2), .seconds(4), .seconds(8), .seconds(16), .seconds(30), .seconds(30)])
        #expect(scheduler.apply(to: path()).portalURL == "http://p/")
        _ = scheduler.finished(id: id, .init(connectivity: .full, answer: "HTTP 204"), at: now, date: date)
        #expect(scheduler.deadline == now + .seconds(300))
        #expect(scheduler.apply(to: path()).portalURL == nil)
    }

    @Test func routeChangesCancelTheRunningCheckAndNoRouteIsOffline() {
        var scheduler = ConnectivityScheduler(check: check)
        _ = scheduler.pathChanged(path(), at: date)
        #expect(scheduler.pathChanged(path(gateway: "10.0.0.254"), at: date)
                == [.cancel(id: 1), .start(id: 2, target: .init(routes: path(gateway: "10.0.0.254").routes))])
        // The cancelled check's late answer is ignored.
        let late = scheduler.finished(id: 1, .init(connectivity: .full, answer: "late"), at: start, date: date)
        #expect(!late)
        #expect(scheduler.apply(to: path()).connectivity == .unknown)
        let offline = NetworkPath.unsatisfied(.noRoute)
        #expect(scheduler.pathChanged(offline, at: date) == [.cancel(id: 2)])
        #expect(scheduler.apply(to: offline).connectivity == .offline)
        #expect(scheduler.deadline == nil)
        #expect(scheduler.timerFired(at: start + .seconds(1000)).isEmpty)  // nothing is sent without a route
    }

    @Test func evidenceIsNotPartOfEquality() {
        var a = path()
        a.connectivity = .full
        a.connectivityEvidence = ConnectivityEvidence(url: "u", time: date, answer: "HTTP 204 in 1 ms")
        var b = a
        b.connectivityEvidence = ConnectivityEvidence(url: "u", time: date + 300, answer: "HTTP 204 in 2 ms")
        #expect(a == b && a.hashValue == b.hashValue)
        b.connectivity = .portal
        #expect(a != b)
    }
}
