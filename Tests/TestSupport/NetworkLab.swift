import Foundation
import Glibc
import Synchronization

// Network namespaces for the integration suites (and any suite that needs one): moved here from
// IntegrationTests (issue 31), so every test target builds its labs one way.

/// Whether this process may create network namespaces (CAP_NET_ADMIN and CAP_SYS_ADMIN: root;
/// CI runs as root, so there the integration suites run).
public let isRoot = geteuid() == 0

/// Thrown when a command used to build a lab fails.
public struct LabCommandFailure: Error, CustomStringConvertible {
    /// The command, its exit status and its stderr.
    public var description: String

    /// A failure described by `description`.
    public init(description: String) { self.description = description }
}

/// Runs a command to completion and returns its stdout; throws with stderr on failure.
@discardableResult
public func sh(_ arguments: [String], input: String? = nil) throws -> String {
    let out = Pipe(), err = Pipe()
    let inPipe = Pipe()
    // Without input the child keeps this process's stdin, as it always did.
    let process = try ChildProcess.start(arguments[0], Array(arguments.dropFirst()), input: input != nil ? inPipe : FileHandle.standardInput,
                                         output: out, error: err)
    if let input {
        inPipe.fileHandleForWriting.write(Data(input.utf8))
        try inPipe.fileHandleForWriting.close()
    }
    let output = out.fileHandleForReading.readDataToEndOfFile()
    let errors = err.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    guard process.terminationStatus == 0 else {
        throw LabCommandFailure(description: "\(arguments.joined(separator: " ")) exited \(process.terminationStatus): "
                             + String(decoding: errors, as: UTF8.self))
    }
    return String(decoding: output, as: UTF8.self)
}

/// Runs `ip ARGS` (split on spaces).
@discardableResult
public func ip(_ arguments: String) throws -> String {
    try sh(["ip"] + arguments.split(separator: " ").map(String.init))
}

private let labCounter = Atomic<Int>(0)

/// A set of network namespaces named with a unique prefix, removed by `close()`.
public final class NetworkLab: Sendable {
    /// `rchT` + pid + a counter: every namespace of this lab starts with it.
    public let prefix: String
    /// The namespaces made so far (removed by `close()`).
    public let namespaces = Mutex<[String]>([])
    /// Helper processes to kill at `close()`.
    public let children = Mutex<[Process]>([])

    /// A lab with a fresh prefix and no namespace yet.
    public init() {
        let n = labCounter.add(1, ordering: .relaxed).newValue
        prefix = "rchT\(getpid() % 100_000)x\(n)"
    }

    /// Creates namespace `PREFIX-suffix` with loopback up and returns its name.
    public func namespace(_ suffix: String) throws -> String {
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
    public func spawn(_ arguments: [String]) throws -> Process {
        let process = try ChildProcess.start(arguments[0], Array(arguments.dropFirst()), input: FileHandle.standardInput)
        children.withLock { $0.append(process) }
        return process
    }

    /// Creates a tun device in `namespace` with carrier: a Python process holds it open
    /// (a tun device without a reader has no carrier, so routes through it would be dead).
    public func attachedTun(_ name: String, in namespace: String) throws {
        let script = """
        import fcntl, os, struct, sys
        fd = os.open('/dev/net/tun', os.O_RDWR)
        fcntl.ioctl(fd, 0x400454ca, struct.pack('16sH', sys.argv[1].encode(), 0x0001 | 0x1000))
        sys.stdout.write('ready\\n'); sys.stdout.flush()
        sys.stdin.read()
        """
        let out = Pipe()
        let input = Pipe()
        let process = try ChildProcess.start("python3", ["-c", script, name], prefix: ["ip", "netns", "exec", namespace],
                                             input: input, output: out, error: FileHandle.standardError)
        children.withLock { $0.append(process) }
        // Block until the device exists: the script prints once TUNSETIFF succeeded.
        let line = out.fileHandleForReading.availableData
        guard String(decoding: line, as: UTF8.self).contains("ready") else {
            throw LabCommandFailure(description: "could not attach tun \(name) in \(namespace)")
        }
    }

    /// Kills the helpers and removes the namespaces.
    public func close() {
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
