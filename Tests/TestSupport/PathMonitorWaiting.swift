import Foundation
import LinuxReachability
import Synchronization
import Testing

// Waiting for a path monitor's paths, with what was seen on failure (the namespaces themselves
// are TestSupport's `NetworkLab`).

/// Why the integration suites are skipped without root.
public let rootReason: Comment = "needs root to create network namespaces (CI runs as root)"

/// Waits until `monitor` publishes a path satisfying `predicate`, or fails after `timeout`.
/// The deadline is a bound, not a pause: the call returns as soon as the path arrives.
public func waitForPath(_ monitor: PathMonitor, timeout: Duration = .seconds(5),
                 sourceLocation: SourceLocation = #_sourceLocation,
                 _ description: String, _ predicate: @escaping @Sendable (NetworkPath) -> Bool) async throws -> NetworkPath {
    try await firstElement(of: monitor.paths, timeout: timeout, sourceLocation: sourceLocation, description,
                           describe: describe, predicate)
}

/// The first element of `stream` satisfying `predicate`; records an issue listing what was seen
/// and throws after `timeout` (a bound, not a pause).
public func firstElement<Element: Sendable>(of stream: AsyncStream<Element>, timeout: Duration,
                                     sourceLocation: SourceLocation, _ description: String,
                                     describe: @escaping @Sendable (Element) -> String,
                                     _ predicate: @escaping @Sendable (Element) -> Bool) async throws -> Element {
    let seen = SeenLog<Element>()
    let found: Element? = await withTaskGroup(of: Element?.self) { group in
        group.addTask {
            for await element in stream {
                seen.append(element)
                if predicate(element) { return element }
            }
            return nil
        }
        group.addTask {
            await deadline(timeout)
            return nil
        }
        let first = await group.next() ?? nil
        group.cancelAll()
        return first
    }
    guard let found else {
        let history = seen.all.map(describe).joined(separator: "\n  ")
        Issue.record("timed out after \(timeout) waiting for \(description); seen:\n  \(history)",
                     sourceLocation: sourceLocation)
        throw LabCommandFailure(description: "timed out waiting for \(description)")
    }
    return found
}

/// What a stream delivered while waiting, for failure messages.
public final class SeenLog<Element: Sendable>: Sendable {
    private let elements = Mutex<[Element]>([])
    /// An empty log.
    public init() {}
    /// Records `element`.
    public func append(_ element: Element) { elements.withLock { $0.append(element) } }
    /// Everything recorded, in order.
    public var all: [Element] { elements.withLock { $0 } }
}

/// Suspends until `timeout` has passed or the task is cancelled.
public func deadline(_ timeout: Duration) async {
    let (stream, continuation) = AsyncStream.makeStream(of: Void.self)
    let nanoseconds = Int(timeout.components.seconds) * 1_000_000_000 + Int(timeout.components.attoseconds / 1_000_000_000)
    DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(nanoseconds)) { continuation.finish() }
    await withTaskCancellationHandler {
        for await _ in stream {}
    } onCancel: {
        continuation.finish()
    }
}

/// A one-line summary of `path` for failure messages.
public func describe(_ path: NetworkPath) -> String {
    guard path.isSatisfied else { return "unsatisfied: \(path.unsatisfiedReason?.rawValue ?? "?")" }
    let routes = path.routes.map { "\($0.family.rawValue) \($0.interfaceName) gw \($0.gateway ?? "-") src \($0.sourceAddress ?? "-")" }
    return "satisfied \(path.connection.rawValue) via \(path.primaryInterface?.name ?? "?") [\(routes.joined(separator: "; "))]"
}

/// Starts a monitor on `namespace`.
public func startMonitor(in namespace: String, overrides: [ClassificationOverride] = [],
                  receiveBufferSize: Int = 8 << 20, allInterfaces: Bool = false) throws -> PathMonitor {
    let monitor = PathMonitor(configuration: .init(networkNamespace: namespace, classificationOverrides: overrides,
                                                   receiveBufferSize: receiveBufferSize, includesAllInterfaces: allInterfaces))
    try monitor.start()
    return monitor
}
