import Foundation
import Synchronization

/// `urlsession-probe` (a ResumableURLSession with a delegate that prints NDJSON) run inside a
/// namespace; its lines parsed as JSON objects, commands go to its stdin.
public final class ProbeProcess: Sendable {
    /// One NDJSON line and when it arrived.
    public struct Line: Sendable {
        /// The parsed object.
        public var object: [String: SendableJSON]
        /// When the test read it.
        public var arrival: ContinuousClock.Instant
    }

    /// JSON values the probe prints (strings and integers), Sendable.
    public enum SendableJSON: Sendable, Equatable {
        case int(Int), string(String), null
        /// The integer, if this is one.
        public var int: Int? { if case .int(let value) = self { value } else { nil } }
        /// The string, if this is one.
        public var string: String? { if case .string(let value) = self { value } else { nil } }
    }

    private let child: LineProcess

    /// Starts `product ARGUMENTS` (inside `namespace` when given).
    public init(_ arguments: [String], namespace: String?, product: String = "urlsession-probe", prefix: [String] = [],
         environment: [String: String] = [:]) throws {
        child = try LineProcess(product, arguments, namespace: namespace, prefix: prefix, environment: environment)
    }

    /// `text` as a JSON object of strings and integers, or nil.
    public static func parse(_ text: String) -> [String: SendableJSON]? {
        guard let raw = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any] else { return nil }
        var object: [String: SendableJSON] = [:]
        for (key, value) in raw {
            if let number = value as? Int { object[key] = .int(number) }
            else if let text = value as? String { object[key] = .string(text) }
            else { object[key] = .null }
        }
        return object
    }

    /// The JSON lines so far.
    public var lines: [Line] { child.lines.compactMap { line in Self.parse(line.text).map { Line(object: $0, arrival: line.arrival) } } }

    /// The lines whose `call` is `name`.
    public func calls(_ name: String) -> [Line] { lines.filter { $0.object["call"]?.string == name } }

    /// Waits for a line satisfying `predicate`; returns it, or nil at the deadline.
    public func waitForLine(timeout: Duration = .seconds(30), _ predicate: @escaping @Sendable ([String: SendableJSON]) -> Bool) async -> Line? {
        guard let line = await child.waitForLine(timeout: timeout, { Self.parse($0).map(predicate) ?? false }),
              let object = Self.parse(line.text) else { return nil }
        return Line(object: object, arrival: line.arrival)
    }

    /// Waits for a `call: name` line (of `task`, when given).
    public func waitForCall(_ name: String, task: Int? = nil, timeout: Duration = .seconds(30)) async -> Line? {
        await waitForLine(timeout: timeout) { $0["call"]?.string == name && (task == nil || $0["task"]?.int == task) }
    }

    /// Waits until a `wrote` line reports `bytes` in total.
    public func waitForBytes(_ bytes: Int, timeout: Duration = .seconds(30)) async -> Bool {
        await waitForLine(timeout: timeout) { $0["call"]?.string == "wrote" && ($0["total"]?.int ?? 0) >= bytes } != nil
    }

    /// `didWriteData` totals of `task`, in order.
    public func totals(task: Int) -> [Int] {
        calls("wrote").filter { $0.object["task"]?.int == task }.compactMap { $0.object["total"]?.int }
    }

    /// Writes a command line to its stdin.
    public func send(_ command: String) { child.send(command) }
    /// Its exit status, or nil after `timeout`.
    public func waitForExit(timeout: Duration = .seconds(20)) async -> Int32? { await child.waitForExit(timeout: timeout) }
    /// SIGKILL, and reaped.
    public func kill() { child.kill() }
    /// Its process id.
    public var pid: Int32 { child.process.processIdentifier }
    /// Everything it printed, for a failing expectation.
    public var transcript: String { child.transcript }
}
