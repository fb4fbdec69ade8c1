import Foundation
import LinuxReachability
import ResumableDownloads
import Testing
import TestSupport
@testable import ReachabilityEvents

/// The agent's metric families and their two text formats, read back by a real parser
/// (prometheus_client), with hostile label values and the counters.
@Suite("metrics")
struct MetricsTests {
    static let start = PathFixtures.time

    /// An interface name the kernel accepts (no '/', ':' or whitespace) that tries every trick a
    /// label value allows: quotes, backslashes (a literal `\n`), braces, '=', ',', '#', ESC.
    static let hostileName = #"q"}\n{a=1,#"# + "\u{1B}"

    static let hostile = NetworkInterface(name: hostileName, index: 9, type: .other, classificationReason: "test",
                                          isUp: true, hasCarrier: true, addresses: ["10.0.0.9"])

    static func withHostile(_ path: NetworkPath) -> NetworkPath {
        var path = path
        path.interfaces.append(hostile)
        return path
    }

    /// A day in the life: wifi, an outage of 90 s, cellular.
    static func scriptedMetrics() -> PathMetrics {
        var metrics = PathMetrics(startedAt: start)
        metrics.record(withHostile(PathFixtures.satisfiedWifi), at: start)
        metrics.record(withHostile(PathFixtures.satisfiedWifi), at: start + 5)   // the same path again: no change
        metrics.record(PathFixtures.noRoute, at: start + 10)
        metrics.record(NetworkPath.unsatisfied(.noCarrier), at: start + 40)   // still out: one outage
        var portal = withHostile(PathFixtures.cellular)
        portal.connectivity = .portal
        metrics.record(portal, at: start + 100)
        return metrics
    }

    static func scriptedDownloads() -> DownloadMetrics {
        let downloads = DownloadMetrics(startedAt: start)
        let id = UUID(), restored = UUID()
        downloads.follow(id, offset: 0)
        downloads.progressed(id, to: 1000)
        downloads.progressed(id, to: 1500)
        downloads.record(.retrying(after: .seconds(1), error: .networkConnectionLost), for: id)
        downloads.record(.restartedFromZero(reason: "changed"), for: id)
        downloads.progressed(id, to: 0)        // restart: baseline moves, nothing counted
        downloads.progressed(id, to: 200)
        downloads.record(.completed(URL(fileURLWithPath: "/x")), for: id)
        downloads.follow(restored, offset: 5000)   // bytes on disk at restore are not received
        downloads.progressed(restored, to: 5000)
        downloads.progressed(restored, to: 5100)
        downloads.record(.failed(.cancelled), for: restored)
        downloads.record(.failed(.badServerResponse), for: UUID())
        // Two running downloads: one over two uplinks, one on the routing table's path.
        let wide = UUID(), narrow = UUID()
        downloads.connections(wide, DownloadConnections(count: 6, paths: [.init(interface: "eth0", connections: 4),
                                                                          .init(interface: "wwan0", connections: 2)]))
        downloads.connections(narrow, DownloadConnections(count: 1, paths: [.init(interface: nil, connections: 1)]))
        downloads.connections(narrow, DownloadConnections(count: 3, paths: [.init(interface: nil, connections: 3)]))
        return downloads
    }

    static func families() -> [MetricFamily] {
        scriptedMetrics().families(at: start + 130)
            + scriptedDownloads().families(counts: ["running": 2, "completed": 1, "failed": 3])
    }

    // MARK: counters

    @Test func pathCountersFollowChangesAndOutages() {
        let metrics = Self.scriptedMetrics()
        #expect(metrics.changes == 3)
        #expect(metrics.outages == 1)
        #expect(metrics.outageSeconds(at: Self.start + 130) == 90)
        #expect(metrics.lastChangeAt == Self.start + 100)

        var startsOut = PathMetrics(startedAt: Self.start)
        startsOut.record(PathFixtures.noRoute, at: Self.start)
        #expect(startsOut.outages == 1, "an unsatisfied path at start is an outage")
        #expect(startsOut.outageSeconds(at: Self.start + 7) == 7, "the current outage counts")
        startsOut.record(PathFixtures.satisfiedWifi, at: Self.start + 3)
        startsOut.record(PathFixtures.noRoute, at: Self.start + 1)   // the wall clock stepped back
        startsOut.record(PathFixtures.satisfiedWifi, at: Self.start)
        #expect(startsOut.outageSeconds(at: Self.start + 50) == 3, "a clock step never makes time negative")
        #expect(startsOut.outages == 2)
    }

    @Test func downloadCountersCountOnlyNewBytes() {
        let counters = Self.scriptedDownloads().counters
        #expect(counters == DownloadMetrics.Counters(receivedBytes: 1500 + 200 + 100, retries: 1, restartsFromZero: 1,
                                                     completed: 1, failed: 1, cancelled: 1))
    }

    @Test func serverWaitsAreCountedAndTimedUntilTheNextEvent() {
        let downloads = DownloadMetrics(startedAt: Self.start)
        let a = UUID(), b = UUID(), c = UUID()
        let refused = DownloadError.cannotConnectToHost
        downloads.record(.resumed(at: 10), for: a, at: Self.start)
        downloads.record(.waitingForServer(refused), for: a, at: Self.start + 10)
        downloads.record(.waitingForServer(refused), for: a, at: Self.start + 11)   // the same wait
        downloads.record(.waitingForServer(.timedOut), for: b, at: Self.start + 20)
        downloads.record(.waitingForServer(refused), for: c, at: Self.start + 30)
        #expect(downloads.waitingForServer == 3)
        #expect(downloads.serverWaitSeconds(at: Self.start + 40) == 30 + 20 + 10, "open waits count up to now")
        downloads.record(.resumed(at: 500), for: a, at: Self.start + 45)            // a probe got an answer
        downloads.record(.waitingForConnectivity, for: b, at: Self.start + 50)      // now a path wait
        downloads.record(.failed(.cancelled), for: c, at: Self.start + 25)          // the wall clock stepped back
        #expect(downloads.waitingForServer == 0)
        #expect(downloads.counters.serverWaits == 3)
        #expect(downloads.counters.endedServerWaitSeconds == 35 + 30 + 0)
        downloads.record(.waitingForServer(refused), for: a, at: Self.start + 100)  // a second outage
        let families = downloads.families(counts: [:], at: Self.start + 102)
        func value(_ name: String) -> Double? { families.first { $0.name == name }?.samples.first?.value }
        #expect(value("reachability_downloads_waiting_for_server") == 1)
        #expect(value("reachability_download_server_waits") == 4)
        #expect(value("reachability_download_server_wait_seconds") == 67)
        let text = MetricsText.render(families, format: .prometheus)
        #expect(text.contains("# TYPE reachability_download_server_wait_seconds_total counter\nreachability_download_server_wait_seconds_total 67\n"), "\(text)")
        #expect(text.contains("\nreachability_downloads_waiting_for_server 1\n"))
    }

    @Test func gaugesDescribeThePath() throws {
        let families = Self.families()
        func values(_ name: String) -> [String: Double] {
            Dictionary(uniqueKeysWithValues: (families.first { $0.name == name }?.samples ?? []).map {
                ($0.labels.map { "\($0.name)=\($0.value)" }.joined(separator: ","), $0.value)
            })
        }
        #expect(values("reachability_path_satisfied") == ["": 1])
        #expect(values("reachability_path_connection") == ["connection=wired": 0, "connection=wifi": 0,
                                                           "connection=cellular": 1, "connection=unavailable": 0])
        #expect(values("reachability_path_expensive") == ["": 1])
        #expect(values("reachability_path_connectivity") == ["state=unknown": 0, "state=none": 0, "state=limited": 0,
                                                             "state=portal": 1, "state=full": 0])
        #expect(values("reachability_interface_primary").filter { $0.value == 1 }.keys.sorted() == ["interface=wwan0,type=cellular"])
        #expect(values("reachability_downloads")["state=failed"] == 3)
        #expect(values("reachability_downloads")["state=paused"] == 0, "every state is listed")
    }

    // MARK: text formats

    @Test func openMetricsTextFollowsTheConventions() {
        let text = MetricsText.render(Self.families(), format: .openMetrics)
        #expect(text.hasSuffix("\n# EOF\n"))
        #expect(text.contains("# TYPE reachability_path_outage_seconds counter\n# UNIT reachability_path_outage_seconds seconds\n"))
        #expect(text.contains("\nreachability_path_outage_seconds_total 90\n"))
        #expect(text.contains("\nreachability_path_outage_seconds_created 1796018400.125\n"))
        #expect(text.contains(#"reachability_downloads_finished_total{result="cancelled"} 1"#))
        #expect(text.contains(#"reachability_interface_up{interface="q\"}\\n{a=1,#"# + "\u{1B}" + #"",type="other"} 1"#))
        // Every sample line: a name, optional labels, one value; nothing else starts a line.
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            #expect(line.hasPrefix("reachability_"), "\(line)")
        }
    }

    @Test func prometheusTextIsWhatNodeExporterReads() {
        let text = MetricsText.render(Self.families(), format: .prometheus)
        #expect(!text.contains("# EOF") && !text.contains("# UNIT") && !text.contains("_created"))
        #expect(text.hasSuffix("\n"))
        // node_exporter's parser (expfmt.TextParser) files a sample under the family its name
        // matches exactly; `# TYPE x counter` followed by `x_total` would make `x_total` untyped.
        var typed: String?
        for line in text.split(separator: "\n") {
            if line.hasPrefix("# TYPE ") {
                let parts = line.split(separator: " ")
                typed = String(parts[2])
                #expect(["counter", "gauge"].contains(parts[3]))
                if parts[3] == "counter" { #expect(parts[2].hasSuffix("_total")) }
            } else if !line.hasPrefix("#") {
                let name = line.prefix { $0 != "{" && $0 != " " }
                #expect(String(name) == typed, "\(line) is not under its # TYPE line")
                // No client-side timestamps: node_exporter skips a whole file that has them.
                let afterLabels = line.split(separator: "}").last ?? line
                #expect(afterLabels.split(separator: " ").count == (line.contains("}") ? 1 : 2), "\(line)")
            }
        }
    }

    @Test(arguments: ["plain", "a\"b", #"back\slash"#, #"literal \n"#, "new\nline", "} 1\nfake_metric 1", "ümlaut ☃", "\u{1B}[2J", "\r"])
    func labelValuesRoundTrip(value: String) throws {
        let family = MetricFamily("t_value", .gauge, help: "A test.", samples: [MetricSample(1, labels: [("name", value)])])
        for format in [MetricsFormat.openMetrics, .prometheus] {
            let text = MetricsText.render([family], format: format)
            #expect(text.split(separator: "\n").filter { !$0.hasPrefix("#") }.count == 1, "one sample line: \(text)")
            let parsed = try MetricsParser.parse(text, format: MetricsParser.Format(rawValue: format.rawValue)!)
            #expect(parsed.count == 1)
            #expect(parsed.first?.samples.first?.labels["name"] == value, "\(format)")
        }
    }

    @Test func numbers() {
        #expect(MetricsText.number(3) == "3")
        #expect(MetricsText.number(-0.5) == "-0.5")
        #expect(MetricsText.number(.infinity) == "+Inf")
        #expect(MetricsText.number(-.infinity) == "-Inf")
        #expect(MetricsText.number(.nan) == "NaN")
        #expect(MetricsText.number(1e300) == "1e+300")
        #expect(MetricsText.number(3.007539749145508) == "3.008")
        #expect(MetricsText.number(1_796_066_116.3252344) == "1796066116.325")
    }

    /// The real parser reads every family back, in both formats, with its type, unit and values.
    @Test func aRealParserReadsBothFormats() throws {
        let families = Self.families()
        let openMetrics = try MetricsParser.parse(MetricsText.render(families, format: .openMetrics), format: .openMetrics)
        let prometheus = try MetricsParser.parse(MetricsText.render(families, format: .prometheus), format: .prometheus)
        #expect(openMetrics.map(\.name) == families.map(\.name))
        #expect(prometheus.map(\.name) == families.map(\.name), "the text parser strips _total from counter families")
        for family in families {
            for parsed in [openMetrics, prometheus] {
                let read = try #require(MetricsParser.family(family.name, in: parsed))
                #expect(read.type == family.kind.rawValue, "\(family.name)")
                let values = read.samples(named: MetricsText.sampleName(family)).map(\.value)
                #expect(values == family.samples.map(\.value), "\(family.name)")
            }
            let read = try #require(MetricsParser.family(family.name, in: openMetrics))
            #expect(read.unit == (family.unit ?? ""))
            #expect(read.help == family.help)
        }
        let hostile = try #require(MetricsParser.family("reachability_interface_usable", in: openMetrics))
        #expect(hostile.samples.contains { $0.labels == ["interface": Self.hostileName, "type": "other"] && $0.value == 1 })
        let outage = try #require(MetricsParser.family("reachability_path_outage_seconds", in: openMetrics))
        #expect(outage.samples(named: "reachability_path_outage_seconds_created").first?.value == Self.start.timeIntervalSince1970)
    }

    @Test func connectionsAreCountedByPathAndLeaveWithTheirDownload() throws {
        let downloads = Self.scriptedDownloads()
        var family = try #require(downloads.families(counts: [:]).first { $0.name == "reachability_download_connections" })
        #expect(family.samples.map(\.value) == [3, 4, 2], "default, eth0, wwan0 (sorted by label)")
        #expect(family.samples.map { $0.labels.first?.1 } == ["default", "eth0", "wwan0"])
        // A download that stops transferring leaves the gauge; none left is an empty family.
        let alone = DownloadMetrics(startedAt: Self.start)
        let id = UUID()
        alone.connections(id, DownloadConnections(count: 2, paths: [.init(interface: "eth0", connections: 2)]))
        alone.record(.paused, for: id)
        family = try #require(alone.families(counts: [:]).first { $0.name == "reachability_download_connections" })
        #expect(family.samples.isEmpty)
        let parsed = try MetricsParser.parse(MetricsText.render([family], format: .openMetrics), format: .openMetrics)
        #expect(MetricsParser.family("reachability_download_connections", in: parsed) != nil)
    }

    @Test func namesFollowTheConventions() {
        for family in Self.families() {
            #expect(family.name.range(of: "^reachability_[a-z_]+$", options: .regularExpression) != nil, "\(family.name)")
            #expect(!family.name.hasSuffix("_total"), "counters get _total in the sample, not the family")
            if let unit = family.unit { #expect(family.name.hasSuffix("_" + unit)) }
            #expect(family.help.hasSuffix("."))
        }
    }
}
