import Foundation

/// An independent reading of docs/events.md (not the encoder): what every NDJSON line of
/// `reachability agent` and `reachability download --json` must look like. Returns the problems.
public enum EventSchemaValidator {
    /// The `event` values of `type: download` lines.
    public static let downloadEvents: Set<String> = ["queued", "restored", "started", "resumed", "progress", "connections", "waiting",
                                              "waitingForServer", "retrying", "restarted", "paused", "completed", "failed",
                                              "sourceChanged", "sourceDropped"]
    /// The `type` values.
    public static let types: Set<String> = ["download", "path", "agent", "control", "wait", "upload"]
    /// The `event` values of `type: upload` lines.
    public static let uploadEvents: Set<String> = ["queued", "restored", "started", "protocol", "created", "interrupted", "resumed",
                                            "waiting", "progress", "paused", "completed", "failed"]
    /// The `event` values of `type: wait` lines.
    public static let waitEvents: Set<String> = ["waiting", "online", "timedOut", "stopped"]

    /// What is wrong with `line` against the documented schema; empty when nothing.
    public static func problems(_ line: String) -> [String] {
        guard let object = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any] else {
            return ["not a JSON object: \(line)"]
        }
        var problems: [String] = []
        guard object["schema"] as? Int == 1 else { return ["schema is not 1: \(line)"] }
        guard let time = object["time"] as? String, time.hasSuffix("Z"), time.contains("T") else { return ["bad time: \(line)"] }
        guard let type = object["type"] as? String, types.contains(type) else { return ["bad type: \(line)"] }
        guard let event = object["event"] as? String, !event.isEmpty else { return ["no event: \(line)"] }
        if !line.hasPrefix(#"{"schema":1,"time":"#) { problems.append("schema and time must come first: \(line)") }
        switch type {
        case "download":
            if !downloadEvents.contains(event) { problems.append("unknown download event \(event)") }
            for key in ["id", "url", "file", "bytes", "total"] where object.index(forKey: key) == nil {
                problems.append("download line without \(key): \(line)")
            }
            if event == "started" || event == "resumed", object.index(forKey: "proxy") == nil
                || !(object["proxy"] is String || object["proxy"] is NSNull) {
                problems.append("\(event) without proxy (a string or null): \(line)")
            }
            switch event {
            case "resumed": if !(object["offset"] is Int) { problems.append("resumed without offset: \(line)") }
            case "progress":
                if !(object["bytesPerSecond"] is Int) { problems.append("progress without bytesPerSecond") }
                if object.index(forKey: "connections") != nil || object.index(forKey: "paths") != nil {
                    problems += connectionProblems(object, line)
                }
            case "connections": problems += connectionProblems(object, line)
            case "retrying":
                if !(object["retryInMilliseconds"] is Int) { problems.append("retrying without retryInMilliseconds") }
                problems += errorProblems(object["error"], line)
            case "failed", "waitingForServer": problems += errorProblems(object["error"], line)
            case "restarted": if !(object["reason"] is String) { problems.append("restarted without reason") }
            case "sourceChanged":
                if !(object["reason"] is String) || !(object["from"] is String) { problems.append("sourceChanged without from and reason") }
            case "sourceDropped":
                if !(object["reason"] is String) || !(object["source"] is String) { problems.append("sourceDropped without source and reason") }
            case "waiting":
                // portalURL is null when NetworkManager's check found the portal (it names none).
                // A job held back by a rule (issue 32) names the rule and says it in `message`.
                let rules: Set<String> = ["noPath", "constrainedPath", "expensivePath", "onBattery", "lowDiskSpace",
                                          "notBefore", "timeWindow"]
                if let reason = object["reason"] as? String, rules.contains(reason) {
                    if !(object["message"] is String) { problems.append("waiting for \(reason) without message: \(line)") }
                    if reason == "lowDiskSpace", !(object["free"] is Int && object["needed"] is Int) {
                        problems.append("lowDiskSpace without free and needed: \(line)")
                    }
                } else if object.index(forKey: "reason") != nil,
                   object["reason"] as? String != "portal" || !(object["portalURL"] is String || object["portalURL"] is NSNull) {
                    problems.append("waiting with a reason other than portal or a rule, or without its portalURL: \(line)")
                }
            default: break
            }
        case "path":
            for key in ["status", "connection", "isExpensive"] where object[key] == nil {
                problems.append("path line without \(key): \(line)")
            }
        case "wait":
            if !waitEvents.contains(event) { problems.append("unknown wait event \(event)") }
            if event != "stopped", !(object["elapsedMilliseconds"] is Int) { problems.append("wait line without elapsedMilliseconds: \(line)") }
            if event != "online", (object["missing"] as? [String])?.isEmpty != false {
                problems.append("wait line without what is missing: \(line)")
            }
        case "upload":
            if !uploadEvents.contains(event) { problems.append("unknown upload event \(event)") }
            for key in ["id", "url", "file", "bytesSent", "total"] where object.index(forKey: key) == nil {
                problems.append("upload line without \(key): \(line)")
            }
            let extra: [String: [String]] = ["restored": ["offset"], "started": ["offset"], "protocol": ["protocol"],
                                             "created": ["uploadURL"], "interrupted": ["code", "message"], "resumed": ["offset"],
                                             "completed": ["status", "protocol", "allBytesSent", "bytesResent"],
                                             "failed": ["code", "message", "resumable"]]
            for key in extra[event] ?? [] where object.index(forKey: key) == nil {
                problems.append("upload \(event) line without \(key): \(line)")
            }
        default:
            break
        }
        return problems
    }

    /// `connections` (a count) and `paths` (`[{"interface": name or null, "connections": n}]`).
    private static func connectionProblems(_ object: [String: Any], _ line: String) -> [String] {
        guard let count = object["connections"] as? Int, count >= 0, let paths = object["paths"] as? [[String: Any]],
              paths.allSatisfy({ ($0["interface"] is String || $0["interface"] is NSNull) && $0["connections"] is Int }) else {
            return ["bad connections or paths: \(line)"]
        }
        return []
    }

    private static func errorProblems(_ value: Any?, _ line: String) -> [String] {
        guard let error = value as? [String: Any], error["urlErrorCode"] is Int, error["message"] is String,
              error["resumable"] is Bool, error.index(forKey: "httpStatus") != nil else {
            return ["bad error object: \(line)"]
        }
        return []
    }
}
