import FoundationEssentials
import Glibc
import ResumableDownloads

/// The agent's control protocol: one JSON object per line in each direction, over the Unix
/// socket in the state directory.
///
/// Request: `{"version":1,"id":7,"command":"add","url":"http://...","output":"/abs/file","sha256":"..."}`
/// (`command` is one of `add`, `list`, `pause`, `resume`, `cancel`, `status`, `metrics`; `pause`/`resume`/`cancel`
/// take `"download":"ID or unique prefix"`; `metrics` takes an optional `"format":"openmetrics"|"prometheus"`). Reply: `{"version":1,"id":7,"ok":true,...}` or
/// `{"version":1,"id":7,"ok":false,"error":{"code":"...","message":"..."}}`.
/// Everything here is pure (no sockets), so it is unit tested directly.
enum ControlProtocol {
    /// The only version spoken; a request with another one gets `unsupportedVersion`.
    static let version = 1
    /// Longest request line accepted; longer ones are answered with `tooLarge` and skipped.
    static let maximumRequestSize = 64 << 10
}

/// A request's `id`, echoed in its reply: a number or a string, as the client chose.
enum ControlRequestID: Codable, Sendable, Hashable {
    /// `"id": 7`
    case number(Int)
    /// `"id": "abc"`
    case text(String)

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let number = try? container.decode(Int.self) {
            self = .number(number)
        } else {
            self = .text(try container.decode(String.self))
        }
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .number(let number): try container.encode(number)
        case .text(let text): try container.encode(text)
        }
    }
}

/// The commands of the protocol, as spelled on the wire.
enum ControlCommandName: String, Codable, Sendable, CaseIterable {
    case add, list, pause, resume, cancel, status, metrics
}

/// One request line as it travels.
struct ControlRequest: Codable, Sendable, Equatable {
    var version: Int
    var id: ControlRequestID?
    var command: ControlCommandName
    var url: String?
    var output: String?
    var sha256: String?
    /// `add`: replace an existing file at the destination (otherwise the request is refused).
    var replace: Bool?
    var download: String?
    /// For `metrics`: `openmetrics` (default) or `prometheus`; checked in `ControlCodec`.
    var format: String?

    init(id: ControlRequestID?, command: ControlCommand) {
        version = ControlProtocol.version
        self.id = id
        self.command = command.name
        switch command {
        case .add(let url, let output, let sha256, let replace):
            self.url = url.absoluteString
            self.output = output
            self.sha256 = sha256
            self.replace = replace ? true : nil
        case .pause(let download), .resume(let download), .cancel(let download):
            self.download = download
        case .metrics(let format):
            self.format = format.rawValue
        case .list, .status:
            break
        }
    }

    private enum CodingKeys: String, CodingKey {
        case version, id, command, url, output, sha256, replace, download, format
    }

    /// Decodes like the synthesized init, except that an unknown command name is reported as
    /// `unknownCommand` (with the id) rather than as a malformed request.
    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        version = try container.decode(Int.self, forKey: .version)
        id = try container.decodeIfPresent(ControlRequestID.self, forKey: .id)
        let name = try container.decode(String.self, forKey: .command)
        guard let command = ControlCommandName(rawValue: name) else {
            throw ControlRejection(id: id, error: .unknownCommand(name))
        }
        self.command = command
        url = try container.decodeIfPresent(String.self, forKey: .url)
        output = try container.decodeIfPresent(String.self, forKey: .output)
        sha256 = try container.decodeIfPresent(String.self, forKey: .sha256)
        replace = try container.decodeIfPresent(Bool.self, forKey: .replace)
        download = try container.decodeIfPresent(String.self, forKey: .download)
        format = try container.decodeIfPresent(String.self, forKey: .format)
    }
}

/// What a valid request asks for.
enum ControlCommand: Sendable, Equatable {
    /// Queue a download; `output` is an absolute path inside the agent's download directories,
    /// or nil for the agent's files directory; `replace` allows replacing an existing file.
    case add(url: URL, output: String?, sha256: String?, replace: Bool = false)
    /// Every download the agent knows.
    case list
    /// Pause the download with this ID (or unique ID prefix).
    case pause(String)
    /// Resume it.
    case resume(String)
    /// Cancel it (deletes the partial file).
    case cancel(String)
    /// The agent itself: path, limits, counts.
    case status
    /// The agent's metrics as text in this format.
    case metrics(MetricsFormat)

    /// The name on the wire.
    var name: ControlCommandName {
        switch self {
        case .add: .add
        case .list: .list
        case .pause: .pause
        case .resume: .resume
        case .cancel: .cancel
        case .status: .status
        case .metrics: .metrics
        }
    }
}

/// Machine-readable error kinds; an unknown code from a newer agent decodes as `failed`.
enum ControlErrorCode: String, Codable, Sendable, CaseIterable {
    case malformed, tooLarge, unsupportedVersion, unknownCommand, invalidArgument, notFound, ambiguous
    case permissionDenied, failed

    init(from decoder: any Decoder) throws {
        self = ControlErrorCode(rawValue: try decoder.singleValueContainer().decode(String.self)) ?? .failed
    }
}

/// A protocol-level failure, sent as `{"code":..., "message":...}`.
struct ControlError: Error, Codable, Sendable, Equatable, CustomStringConvertible {
    /// Stable, machine-readable kind.
    var code: ControlErrorCode
    /// For people.
    var message: String

    var description: String { message }

    static func malformed(_ detail: String) -> ControlError { ControlError(code: .malformed, message: "malformed request: \(detail)") }
    static func tooLarge() -> ControlError {
        ControlError(code: .tooLarge, message: "request longer than \(ControlProtocol.maximumRequestSize) bytes")
    }
    static func unsupportedVersion(_ version: Int) -> ControlError {
        ControlError(code: .unsupportedVersion, message: "unsupported protocol version \(version) (this agent speaks \(ControlProtocol.version))")
    }
    static func unknownCommand(_ command: String) -> ControlError {
        let names = ControlCommandName.allCases.map(\.rawValue).joined(separator: ", ")
        return ControlError(code: .unknownCommand, message: "unknown command '\(command)' (expected \(names))")
    }
    static func invalidArgument(_ detail: String) -> ControlError { ControlError(code: .invalidArgument, message: detail) }
    static func notFound(_ id: String) -> ControlError { ControlError(code: .notFound, message: "no download with ID '\(id)'") }
    static func ambiguous(_ id: String) -> ControlError { ControlError(code: .ambiguous, message: "'\(id)' matches more than one download; give more of the ID") }
    static func refused(uid: UInt32) -> ControlError {
        ControlError(code: .permissionDenied, message: "uid \(uid) may not control this agent (only its own user or root)")
    }
    static func failed(_ detail: String) -> ControlError { ControlError(code: .failed, message: detail) }
}

/// A download as the control protocol and `queue list` show it.
struct DownloadSnapshot: Codable, Sendable, Equatable {
    /// The download's UUID.
    var id: String
    var url: String
    var destination: String
    /// queued, running, waitingForConnectivity, paused, completed, failed.
    var state: String
    var bytesReceived: Int64
    var totalBytes: Int64?
    var bytesPerSecond: Int64
    /// For failed downloads.
    var error: String?
}

/// The agent's own state, for `agent status`.
struct AgentStatusSnapshot: Codable, Sendable, Equatable {
    var pid: Int32
    var stateDirectory: String
    var startedAt: String
    var maximumConcurrentDownloads: Int
    var allowsExpensive: Bool
    /// `satisfied` / `unsatisfied`, nil before the first path.
    var pathStatus: String?
    var connection: String?
    var interface: String?
    var isExpensive: Bool?
    /// Number of downloads per state name.
    var counts: [String: Int]
    /// The sd_notify STATUS text, e.g. `3 downloading, 1 waiting for network`.
    var summary: String
}

/// One reply line.
struct ControlResponse: Codable, Sendable, Equatable {
    var version: Int = ControlProtocol.version
    var id: ControlRequestID?
    var ok: Bool
    var error: ControlError?
    var download: DownloadSnapshot?
    var downloads: [DownloadSnapshot]?
    var status: AgentStatusSnapshot?
    /// The metrics text, for `metrics` (in the format asked for).
    var metrics: String?

    static func failure(_ error: ControlError, id: ControlRequestID?) -> ControlResponse {
        ControlResponse(id: id, ok: false, error: error)
    }
    static func success(id: ControlRequestID?, download: DownloadSnapshot? = nil, downloads: [DownloadSnapshot]? = nil,
                        status: AgentStatusSnapshot? = nil, metrics: String? = nil) -> ControlResponse {
        ControlResponse(id: id, ok: true, download: download, downloads: downloads, status: status, metrics: metrics)
    }
}

/// Encoding and decoding of lines; decoding also validates.
enum ControlCodec {
    /// One line (without the newline) for `value`, keys sorted so output is stable.
    static func encode<Value: Encodable>(_ value: Value) -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // Every type encoded here is plain data; encoding cannot fail.
        return Array((try? encoder.encode(value)) ?? Data("{}".utf8))
    }

    /// A validated command from one request line, or the error reply to send (with the id when
    /// it could be read).
    static func decodeRequest(_ line: some Collection<UInt8>) -> Result<(ControlRequestID?, ControlCommand), ControlRejection> {
        let data = Data(line)
        let request: ControlRequest
        do {
            request = try JSONDecoder().decode(ControlRequest.self, from: data)
        } catch let rejection as ControlRejection {
            return .failure(rejection)
        } catch {
            // Salvage the id for the error reply when the object parses but a field does not.
            let id = (try? JSONDecoder().decode(IDOnly.self, from: data))?.id
            return .failure(ControlRejection(id: id, error: .malformed(describe(error))))
        }
        let id = request.id
        guard request.version == ControlProtocol.version else {
            return .failure(ControlRejection(id: id, error: .unsupportedVersion(request.version)))
        }
        switch request.command {
        case .add:
            guard let text = request.url, let url = URL(string: text),
                  let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https", url.host != nil else {
                return .failure(ControlRejection(id: id, error: .invalidArgument("add needs an http or https 'url'")))
            }
            if let output = request.output, !output.hasPrefix("/") {
                return .failure(ControlRejection(id: id, error: .invalidArgument("'output' must be an absolute path")))
            }
            var digest: String?
            if let sha = request.sha256 {
                guard let normalized = SHA256.normalizedHexDigest(sha) else {
                    return .failure(ControlRejection(id: id, error: .invalidArgument("'sha256' must be 64 hex digits")))
                }
                digest = normalized
            }
            return .success((id, .add(url: url, output: request.output, sha256: digest,
                                      replace: request.replace ?? false)))
        case .list: return .success((id, .list))
        case .status: return .success((id, .status))
        case .metrics:
            guard let format = MetricsFormat(rawValue: request.format ?? MetricsFormat.openMetrics.rawValue) else {
                let names = MetricsFormat.allCases.map(\.rawValue).joined(separator: " or ")
                return .failure(ControlRejection(id: id, error: .invalidArgument("'format' must be \(names)")))
            }
            return .success((id, .metrics(format)))
        case .pause, .resume, .cancel:
            guard let download = request.download, !download.isEmpty else {
                return .failure(ControlRejection(id: id, error: .invalidArgument("\(request.command.rawValue) needs a 'download' ID")))
            }
            let command: ControlCommand = switch request.command {
            case .pause: .pause(download)
            case .resume: .resume(download)
            default: .cancel(download)
            }
            return .success((id, command))
        }
    }

    /// Decodes a reply line (client side).
    static func decodeResponse(_ line: some Collection<UInt8>) throws -> ControlResponse {
        try JSONDecoder().decode(ControlResponse.self, from: Data(line))
    }

    private struct IDOnly: Decodable { var id: ControlRequestID? }

    private static func describe(_ error: any Error) -> String {
        switch error {
        case DecodingError.keyNotFound(let key, _): "missing '\(key.stringValue)'"
        case DecodingError.typeMismatch(_, let context), DecodingError.valueNotFound(_, let context):
            "wrong type for '\(context.codingPath.map(\.stringValue).joined(separator: "."))'"
        case DecodingError.dataCorrupted: "not a JSON object"
        default: "not a JSON object"
        }
    }
}

/// A request that gets an error reply instead of being handled.
struct ControlRejection: Error, Sendable, Equatable {
    var id: ControlRequestID?
    var error: ControlError
}

/// Splits a connection's bytes into request lines and decides, per line, whether to handle it or
/// answer with an error. Pure: the socket owner feeds bytes and performs the returned actions.
struct ControlConnectionStateMachine: Sendable {
    /// What the owner must do, in order.
    enum Action: Sendable, Equatable {
        /// Run the command and send its reply.
        case handle(ControlRequestID?, ControlCommand)
        /// Send this reply as is.
        case reply(ControlResponse)
        /// Close the connection.
        case close
    }

    private enum State: Sendable { case reading, discardingOversizedLine, closed }

    private var state = State.reading
    private var buffer: [UInt8] = []

    /// Whether part of a request line has arrived (its deadline runs from its first byte).
    var isInsideRequest: Bool { state == .discardingOversizedLine || (state == .reading && !buffer.isEmpty) }
    let maximumLineLength: Int

    init(maximumLineLength: Int = ControlProtocol.maximumRequestSize) {
        self.maximumLineLength = maximumLineLength
    }

    /// Bytes arrived.
    mutating func received(_ bytes: some Collection<UInt8>) -> [Action] {
        var actions: [Action] = []
        for byte in bytes {
            switch state {
            case .closed:
                return actions
            case .discardingOversizedLine:
                if byte == UInt8(ascii: "\n") { state = .reading }
            case .reading:
                if byte == UInt8(ascii: "\n") {
                    actions += lineEnded()
                } else if buffer.count >= maximumLineLength {
                    // Answer once, then skip to the next newline: framing survives, memory stays bounded.
                    buffer = []
                    state = .discardingOversizedLine
                    actions.append(.reply(.failure(.tooLarge(), id: nil)))
                } else {
                    buffer.append(byte)
                }
            }
        }
        return actions
    }

    /// The peer closed its side (or the read failed); an unterminated last line is still handled.
    mutating func endOfInput() -> [Action] {
        guard state != .closed else { return [] }
        var actions: [Action] = []
        if state == .reading, !buffer.isEmpty { actions += lineEnded() }
        state = .closed
        return actions + [.close]
    }

    private mutating func lineEnded() -> [Action] {
        var line = buffer[...]
        buffer = []
        if line.last == UInt8(ascii: "\r") { line = line.dropLast() }
        if line.allSatisfy({ $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") }) { return [] }
        switch ControlCodec.decodeRequest(line) {
        case .success(let (id, command)): return [.handle(id, command)]
        case .failure(let rejection): return [.reply(.failure(rejection.error, id: rejection.id))]
        }
    }
}

/// Finds a download by full ID or unique prefix (case-insensitive), like git's short hashes.
enum DownloadIDResolver {
    static func resolve(_ text: String, among ids: [UUID]) -> Result<UUID, ControlError> {
        let wanted = text.lowercased()
        let matches = ids.filter { $0.uuidString.lowercased().hasPrefix(wanted) }
        if let exact = ids.first(where: { $0.uuidString.lowercased() == wanted }) { return .success(exact) }
        switch matches.count {
        case 0: return .failure(.notFound(text))
        case 1: return .success(matches[0])
        default: return .failure(.ambiguous(text))
        }
    }
}
