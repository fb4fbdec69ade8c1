import Foundation
import Glibc
import LinuxReachability
import Synchronization
import Testing

/// Integration tests need CAP_NET_ADMIN and CAP_SYS_ADMIN; CI runs as root, so there they run.
let isRoot = geteuid() == 0
let rootReason: Comment = "needs root to create network namespaces (CI runs as root)"

/// Thrown when a command used to build a lab fails.
struct CommandFailure: Error, CustomStringConvertible {
    var description: String
}

/// Runs a command to completion and returns its stdout; throws with stderr on failure.
@discardableResult
func sh(_ arguments: [String], input: String? = nil) throws -> String {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = arguments
    let out = Pipe(), err = Pipe()
    process.standardOutput = out
    process.standardError = err
    let inPipe = Pipe()
    if input != nil { process.standardInput = inPipe }
    try process.run()
    if let input {
        inPipe.fileHandleForWriting.write(Data(input.utf8))
        try inPipe.fileHandleForWriting.close()
    }
    let output = out.fileHandleForReading.readDataToEndOfFile()
    let errors = err.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    guard process.terminationStatus == 0 else {
        throw CommandFailure(description: "\(arguments.joined(separator: " ")) exited \(process.terminationStatus): "
                             + String(decoding: errors, as: UTF8.self))
    }
    return String(decoding: output, as: UTF8.self)
}

/// Runs `ip ARGS` (split on spaces).
@discardableResult
func ip(_ arguments: String) throws -> String {
    try sh(["ip"] + arguments.split(separator: " ").map(String.init))
}

private let labCounter = Atomic<Int>(0)

/// A set of network namespaces named with a unique prefix, removed by `close()`.
final class NetworkLab: Sendable {
    let prefix: String
    let namespaces = Mutex<[String]>([])
    let children = Mutex<[Process]>([])

    init() {
        let n = labCounter.add(1, ordering: .relaxed).newValue
        prefix = "rchT\(getpid() % 100_000)x\(n)"
    }

    /// Creates namespace `PREFIX-suffix` with loopback up and returns its name.
    func namespace(_ suffix: String) throws -> String {
        let name = "\(prefix)-\(suffix)"
        try ip("netns add \(name)")
        namespaces.withLock { $0.append(name) }
        try ip("-n \(name) link set lo up")
        for key in ["net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0"] {
            try sh(["ip", "netns", "exec", name, "sysctl", "-qw", key])
        }
        return name
    }

    /// Starts a long-running helper process, killed by `close()`.
    func spawn(_ arguments: [String]) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        children.withLock { $0.append(process) }
        return process
    }

    /// Creates a tun device in `namespace` with carrier: a Python process holds it open
    /// (a tun device without a reader has no carrier, so routes through it would be dead).
    func attachedTun(_ name: String, in namespace: String) throws {
        let script = """
        import fcntl, os, struct, sys
        fd = os.open('/dev/net/tun', os.O_RDWR)
        fcntl.ioctl(fd, 0x400454ca, struct.pack('16sH', sys.argv[1].encode(), 0x0001 | 0x1000))
        sys.stdout.write('ready\\n'); sys.stdout.flush()
        sys.stdin.read()
        """
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["ip", "netns", "exec", namespace, "python3", "-c", script, name]
        let out = Pipe()
        let input = Pipe()
        process.standardOutput = out
        process.standardInput = input
        try process.run()
        children.withLock { $0.append(process) }
        // Block until the device exists: the script prints once TUNSETIFF succeeded.
        let line = out.fileHandleForReading.availableData
        guard String(decoding: line, as: UTF8.self).contains("ready") else {
            throw CommandFailure(description: "could not attach tun \(name) in \(namespace)")
        }
    }

    func close() {
        // SIGKILL, not terminate(): children spawned from dispatch threads inherit a signal mask
        // that blocks SIGTERM.
        for process in children.withLock({ $0 }) where process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        for name in namespaces.withLock({ $0 }) {
            _ = try? ip("netns del \(name)")
        }
    }

    deinit { close() }
}

/// Waits until `monitor` publishes a path satisfying `predicate`, or fails after `timeout`.
/// The deadline is a bound, not a pause: the call returns as soon as the path arrives.
func waitForPath(_ monitor: PathMonitor, timeout: Duration = .seconds(5),
                 sourceLocation: SourceLocation = #_sourceLocation,
                 _ description: String, _ predicate: @escaping @Sendable (NetworkPath) -> Bool) async throws -> NetworkPath {
    try await firstElement(of: monitor.paths, timeout: timeout, sourceLocation: sourceLocation, description,
                           describe: describe, predicate)
}

/// The first element of `stream` satisfying `predicate`; records an issue listing what was seen
/// and throws after `timeout` (a bound, not a pause).
func firstElement<Element: Sendable>(of stream: AsyncStream<Element>, timeout: Duration,
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
        throw CommandFailure(description: "timed out waiting for \(description)")
    }
    return found
}

/// What a stream delivered while waiting, for failure messages.
final class SeenLog<Element: Sendable>: Sendable {
    private let elements = Mutex<[Element]>([])
    func append(_ element: Element) { elements.withLock { $0.append(element) } }
    var all: [Element] { elements.withLock { $0 } }
}

/// Suspends until `timeout` has passed or the task is cancelled.
func deadline(_ timeout: Duration) async {
    let (stream, continuation) = AsyncStream.makeStream(of: Void.self)
    let nanoseconds = Int(timeout.components.seconds) * 1_000_000_000 + Int(timeout.components.attoseconds / 1_000_000_000)
    DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(nanoseconds)) { continuation.finish() }
    await withTaskCancellationHandler {
        for await _ in stream {}
    } onCancel: {
        continuation.finish()
    }
}

func describe(_ path: NetworkPath) -> String {
    guard path.isSatisfied else { return "unsatisfied: \(path.unsatisfiedReason?.rawValue ?? "?")" }
    let routes = path.routes.map { "\($0.family.rawValue) \($0.interfaceName) gw \($0.gateway ?? "-") src \($0.sourceAddress ?? "-")" }
    return "satisfied \(path.connection.rawValue) via \(path.primaryInterface?.name ?? "?") [\(routes.joined(separator: "; "))]"
}

/// Starts a monitor on `namespace`.
func startMonitor(in namespace: String, overrides: [ClassificationOverride] = [],
                  receiveBufferSize: Int = 8 << 20, allInterfaces: Bool = false) throws -> PathMonitor {
    let monitor = PathMonitor(configuration: .init(networkNamespace: namespace, classificationOverrides: overrides,
                                                   receiveBufferSize: receiveBufferSize, includesAllInterfaces: allInterfaces))
    try monitor.start()
    return monitor
}
