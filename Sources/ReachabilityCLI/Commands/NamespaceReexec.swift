import FoundationEssentials
import LinuxSystem

/// Runs `reachability download --netns NAME` again inside the namespace, as `ip netns exec` would.
///
/// libcurl creates its sockets on the engine thread, and a network namespace is per thread
/// (setns(2)), so entering it on one thread would leave the transfers outside. Re-executing the
/// whole process through `ip netns exec` puts every thread in the namespace and also remounts
/// /sys for it. The marker variable stops the child from doing it again; its path monitor still
/// gets `--netns NAME`, which names the namespace it is already in.
enum NamespaceReexec {
    /// Set in the child's environment to the namespace it runs in.
    static let marker = "REACHABILITY_DOWNLOAD_NETNS"

    /// Only the `reachability` executable re-executes itself (never a test runner calling `run`).
    static var isToolProcess: Bool {
        URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().lastPathComponent == CommandRegistry.toolName
    }

    /// Replaces the process; returns only by throwing.
    static func execute(inNamespace namespace: String, environment: [String: String]) throws -> Never {
        // Same wording as the monitor's error, instead of ip's "Cannot open network namespace" and 255.
        guard FileManager.default.fileExists(atPath: "/run/netns/\(namespace)") else {
            throw CommandFailure(message: "no network namespace named '\(namespace)' (see 'ip netns list')", exitCode: .noSuchNamespace)
        }
        let candidates = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"]
        guard let tool = candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw CommandFailure(message: "--netns needs iproute2's 'ip' (looked in \(candidates.joined(separator: ", ")))",
                                 exitCode: .failure)
        }
        let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path
        let arguments = ["ip", "netns", "exec", namespace, executable] + CommandLine.arguments.dropFirst()
        var variables = environment
        variables[marker] = namespace
        let error = CurrentProcess.execute(tool, arguments: Array(arguments), environment: variables)
        throw CommandFailure(message: "cannot run \(tool) netns exec \(namespace): \(error)", exitCode: .failure)
    }
}
