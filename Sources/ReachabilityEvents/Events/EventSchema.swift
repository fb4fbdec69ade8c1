import FoundationEssentials
import LinuxReachability
import ResumableDownloads
import ReachabilityBase

/// The one NDJSON event vocabulary of `reachability agent` (stdout and agent.log) and
/// `reachability download --json`, described in docs/events.md.
///
/// Every line is one object whose first keys are `schema` (this version), `time`, `type`
/// (`download`, `path`, `agent`, `control`) and `event`. A download line then always carries
/// `id`, `url`, `file`, `bytes` and `total`, followed by the fields of its event. A consumer that
/// sees a `schema` it does not know should stop rather than guess.
package enum EventSchema {
    /// Bumped when a field changes meaning or disappears; new fields and events do not bump it.
    package static let version = 1

    /// What a line is about.
    package enum Kind: String, Sendable, CaseIterable {
        case download, path, agent, control
        /// Background sessions: attached, detached, launches (issue 17).
        case background
        /// `reachability wait --json`: waiting, online, timedOut, stopped.
        case wait
        /// The agent's upload jobs (`queue add --upload`): queued, started, protocol, created,
        /// interrupted, resumed, waiting, progress, paused, completed, failed, restored.
        case upload
    }

    /// Download event names, in one spelling for both commands.
    package enum DownloadEventName: String, Sendable, CaseIterable {
        /// The agent accepted a `queue add` (agent only).
        case queued
        /// The agent found a resume record at start or after a reload (agent only).
        case restored
        case started, resumed, progress, connections, waiting, waitingForServer, retrying, restarted, paused, completed, failed
        /// `download` left a source of the file for the next mirror (`from`, `reason`; the line's
        /// `url` is the new source).
        case sourceChanged
        /// A download stopped using one of its mirrors (`source`, `reason`): its bytes failed a
        /// piece hash or differed from another source's, or it did not serve the same file.
        case sourceDropped

        /// Whether nothing follows this event for the download in this run (a `paused` download
        /// is only ever paused by an interrupt or a user, and its follower ends there).
        package var isTerminal: Bool { self == .completed || self == .failed || self == .paused }
    }

    /// A download's identity and progress, the part every download line shares.
    package struct DownloadFacts: Sendable {
        package var id: String?
        package var url: String
        package var file: String
        package var bytes: Int64?
        package var total: Int64?
        /// The proxy in use, redacted (nil: direct); `started` and `resumed` lines carry it.
        package var proxy: String?

        package init(id: String?, url: String, file: String, bytes: Int64?, total: Int64?, proxy: String? = nil) {
            (self.id, self.url, self.file, self.bytes, self.total, self.proxy) = (id, url, file, bytes, total, proxy)
        }

        package init(_ download: Download) {
            let progress = download.progress
            self.init(id: download.id.uuidString.lowercased(), url: URLRedaction.redacted(download.url),
                      file: download.destination.path, bytes: progress.bytesReceived, total: progress.totalBytes,
                      proxy: download.proxyDescription)
        }
    }

    /// The head every line starts with.
    package static func head(_ kind: Kind, _ event: String, at time: Date) -> [JSONValue.Member] {
        [.init(key: "schema", value: .integer(version)),
         .init(key: "time", value: .string(Timestamp.iso8601(time))),
         .init(key: "type", value: .string(kind.rawValue)),
         .init(key: "event", value: .string(event))]
    }

    /// One line of any kind.
    package static func line(_ kind: Kind, _ event: String, at time: Date, _ fields: [JSONValue.Member] = []) -> String {
        JSONValue.object(head(kind, event, at: time) + fields).serialized
    }

    /// A download line for a library event; `path` (the current one) tells a `waiting` behind a
    /// captive portal from one without a path: `"reason":"portal"` and its `portalURL`.
    package static func downloadLine(_ event: DownloadEvent, _ facts: DownloadFacts, at time: Date, path: NetworkPath? = nil) -> String {
        var (name, fields) = describe(event)
        if name == .started || name == .resumed {
            // Which proxy carried it (a site cache, say), so a fleet's logs show it.
            fields += [.init(key: "proxy", value: .string(facts.proxy))]
        }
        if event == .waitingForConnectivity, let portal = portal(of: path) {
            fields += [.init(key: "reason", value: .string("portal")),
                       .init(key: "portalURL", value: .string(portal.isEmpty ? nil : portal))]
        }
        return downloadLine(name, facts, at: time, fields)
    }

    /// The login URL when `path` is satisfied but behind a captive portal (the probe URL when the
    /// portal named none; empty when NetworkManager's check found it, which names no URL).
    package static func portal(of path: NetworkPath?) -> String? {
        guard let path, path.isSatisfied, path.connectivity == .portal else { return nil }
        if let url = path.portalURL { return url }
        guard let evidence = path.connectivityEvidence, evidence.source == .check else { return "" }
        return evidence.url
    }

    /// A download line for an event name and its fields.
    package static func downloadLine(_ name: DownloadEventName, _ facts: DownloadFacts, at time: Date,
                             _ fields: [JSONValue.Member] = []) -> String {
        let common: [JSONValue.Member] = [
            .init(key: "id", value: .string(facts.id)),
            .init(key: "url", value: .string(facts.url)),
            .init(key: "file", value: .string(facts.file)),
            .init(key: "bytes", value: facts.bytes.map { .integer(Int($0)) } ?? .null),
            .init(key: "total", value: facts.total.map { .integer(Int($0)) } ?? .null),
        ]
        return line(.download, name.rawValue, at: time, common + fields)
    }

    /// The event's name and its own fields.
    package static func describe(_ event: DownloadEvent) -> (DownloadEventName, [JSONValue.Member]) {
        switch event {
        case .started: return (.started, [])
        case .resumed(let offset): return (.resumed, [.init(key: "offset", value: .integer(Int(offset)))])
        case .waitingForConnectivity: return (.waiting, [])
        case .waiting(let reason): return (.waiting, waitReasonFields(reason))
        case .waitingForServer(let error): return (.waitingForServer, [.init(key: "error", value: errorObject(error))])
        case .restartedFromZero(let reason): return (.restarted, [.init(key: "reason", value: .string(reason))])
        case .retrying(let delay, let error):
            return (.retrying, [.init(key: "retryInMilliseconds", value: .integer(Int(delay.milliseconds))),
                                .init(key: "error", value: errorObject(error))])
        case .paused: return (.paused, [])
        case .completed: return (.completed, [])
        case .failed(let error): return (.failed, [.init(key: "error", value: errorObject(error))])
        case .sourceDropped(let source, let reason):
            return (.sourceDropped, [.init(key: "source", value: .string(URLRedaction.redacted(source))),
                                     .init(key: "reason", value: .string(reason))])
        }
    }

    /// `{"urlErrorCode":-1005,"httpStatus":null,"resumable":true,"message":"..."}`
    package static func errorObject(_ error: DownloadError) -> JSONValue {
        .object([
            .init(key: "urlErrorCode", value: .integer(error.errorCode)),
            .init(key: "httpStatus", value: error.httpStatusCode.map(JSONValue.integer) ?? .null),
            .init(key: "resumable", value: .bool(error.isResumable)),
            .init(key: "message", value: .string(error.description)),
        ])
    }

    /// The `progress` event's own fields: the rate, and the connections while any are open.
    package static func progressFields(_ progress: DownloadProgress) -> [JSONValue.Member] {
        [.init(key: "bytesPerSecond", value: .integer(Int(progress.bytesPerSecond)))]
            + (progress.connections.count > 0 ? connectionFields(progress.connections) : [])
    }

    /// `connections` (how many fetch bytes now) and `paths` (`[{"interface": NAME or null,
    /// "connections": N}]`, best first): the `connections` event's fields, also on `progress`.
    package static func connectionFields(_ connections: DownloadConnections) -> [JSONValue.Member] {
        [.init(key: "connections", value: .integer(connections.count)),
         .init(key: "paths", value: .array(connections.paths.map { path in
             .object([.init(key: "interface", value: path.interface.map { .string($0) } ?? .null),
                      .init(key: "connections", value: .integer(path.connections))])
         }))]
    }

    /// `6 connections (eth0 4, wlan0 2)`, for text lines; `1 connection` when it is one.
    package static func connectionText(_ connections: DownloadConnections) -> String {
        let count = "\(connections.count) connection\(connections.count == 1 ? "" : "s")"
        let named = connections.paths.compactMap { path in path.interface.map { "\($0) \(path.connections)" } }
        return named.isEmpty ? count : "\(count) (\(named.joined(separator: ", ")))"
    }

    /// A path line: `changed` with the path's summary.
    package static func pathLine(_ path: NetworkPath, at time: Date) -> String {
        line(.path, "changed", at: time, [
            .init(key: "status", value: .string(path.status.rawValue)),
            .init(key: "reason", value: .string(path.unsatisfiedReason?.rawValue)),
            .init(key: "connection", value: .string(path.connection.rawValue)),
            .init(key: "interface", value: .string(path.isSatisfied ? path.primaryInterface?.name : nil)),
            .init(key: "sourceAddress", value: .string(path.primaryRoute?.sourceAddress)),
            .init(key: "isExpensive", value: .bool(path.isExpensive)),
            .init(key: "isRoaming", value: .bool(path.isRoaming)),
            .init(key: "isConstrained", value: .bool(path.isConstrained)),
            .init(key: "connectivity", value: .string(path.connectivity.rawValue)),
            .init(key: "portalURL", value: .string(path.portalURL)),
        ])
    }
}
