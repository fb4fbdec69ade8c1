import FoundationEssentials
import ResumableDownloads
import ReachabilityEvents

/// Encoding and decoding of lines; decoding also validates.
package enum ControlCodec {
    /// One line (without the newline) for `value`, keys sorted so output is stable.
    package static func encode<Value: Encodable>(_ value: Value) -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // Every type encoded here is plain data; encoding cannot fail.
        return Array((try? encoder.encode(value)) ?? Data("{}".utf8))
    }

    /// A validated command from one request line, or the error reply to send (with the id when
    /// it could be read).
    package static func decodeRequest(_ line: some Collection<UInt8>) -> Result<(ControlRequestID?, ControlCommand), ControlRejection> {
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
            return decodeAdd(request).map { (id, $0) }.mapError { ControlRejection(id: id, error: $0) }
        case .setURL:
            return decodeSetURL(request).map { (id, $0) }.mapError { ControlRejection(id: id, error: $0) }
        case .list:
            if let rows = request.rows, !ControlProtocol.listRows.contains(rows) {
                return .failure(ControlRejection(id: id, error: .invalidArgument(
                    "'rows' must be \(ControlProtocol.listRows.lowerBound)-\(ControlProtocol.listRows.upperBound)")))
            }
            return .success((id, .list(rows: request.rows)))
        case .limit:
            return decodeLimit(request).map { (id, $0) }.mapError { ControlRejection(id: id, error: $0) }
        case .status: return .success((id, .status))
        case .metrics:
            guard let format = MetricsFormat(rawValue: request.format ?? MetricsFormat.openMetrics.rawValue) else {
                let names = MetricsFormat.allCases.map(\.rawValue).joined(separator: " or ")
                return .failure(ControlRejection(id: id, error: .invalidArgument("'format' must be \(names)")))
            }
            return .success((id, .metrics(format)))
        case .addUpload:
            return decodeUpload(request).map { (id, $0) }.mapError { ControlRejection(id: id, error: $0) }
        case .attach, .createTask, .updateTask, .taskAction, .acknowledge, .invalidate:
            return decodeBackground(request).map { (id, $0) }.mapError { ControlRejection(id: id, error: $0) }
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

    /// `text` as an http or https URL with a host, or nil.
    static func downloadableURL(_ text: String?) -> URL? {
        guard let text, let url = URL(string: text), let scheme = url.scheme?.lowercased(),
              scheme == "http" || scheme == "https", url.host != nil else { return nil }
        return url
    }

    /// A background session's command, its fields present and well formed (their content is
    /// checked by the registry, which knows the session).
    private static func decodeBackground(_ request: ControlRequest) -> Result<ControlCommand, ControlError> {
        guard let session = request.session else {
            return .failure(.invalidArgument("\(request.command.rawValue) needs a 'session' identifier"))
        }
        if let problem = BackgroundSessionKey.problem(with: session) { return .failure(.invalidArgument(problem)) }
        func missing(_ field: String) -> Result<ControlCommand, ControlError> {
            .failure(.invalidArgument("\(request.command.rawValue) needs '\(field)'"))
        }
        switch request.command {
        case .attach:
            guard let settings = request.settings else { return missing("settings") }
            return .success(.attach(session: session, settings: settings))
        case .createTask:
            guard let task = request.task else { return missing("task") }
            return .success(.createTask(session: session, task))
        case .updateTask:
            guard let identifier = request.taskIdentifier else { return missing("taskIdentifier") }
            guard let changes = request.changes else { return missing("changes") }
            return .success(.updateTask(session: session, taskIdentifier: identifier, changes))
        case .taskAction:
            guard let identifier = request.taskIdentifier else { return missing("taskIdentifier") }
            guard let name = request.action, let action = BackgroundTaskAction(rawValue: name) else {
                let names = BackgroundTaskAction.allCases.map(\.rawValue).joined(separator: ", ")
                return .failure(.invalidArgument("taskAction needs an 'action' (\(names))"))
            }
            return .success(.taskAction(session: session, taskIdentifier: identifier, action))
        case .acknowledge:
            guard let sequence = request.sequence else { return missing("sequence") }
            return .success(.acknowledge(session: session, sequence: sequence))
        default:
            return .success(.invalidate(session: session))
        }
    }

    /// Decodes a reply line (client side).
    package static func decodeResponse(_ line: some Collection<UInt8>) throws -> ControlResponse {
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
