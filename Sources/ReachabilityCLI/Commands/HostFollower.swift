import LinuxReachability
import Synchronization

/// `wait --host`: the paths to one host as `NetworkPath`s (unsatisfied while its name has no
/// address), and the last answer for the diagnostic.
final class HostFollower: Sendable {
    /// How long `--timeout 0` waits for the host's first answer.
    static let firstAnswerWait = Duration.seconds(5)

    let paths: AsyncStream<NetworkPath>
    /// A class so the relay task can hold it while `self` is being initialised.
    private final class Latest: Sendable { let answer = Mutex<HostPath?>(nil) }
    private let latest = Latest()
    private let relay: Task<Void, Never>

    init(_ hostPaths: AsyncStream<HostPath>) {
        let (paths, continuation) = AsyncStream.makeStream(of: NetworkPath.self)
        self.paths = paths
        relay = Task { [latest] in
            for await hostPath in hostPaths {
                latest.answer.withLock { $0 = hostPath }
                continuation.yield(hostPath.path ?? .unsatisfied(.noRoute))
            }
            continuation.finish()
        }
    }

    /// `unreachable: no route`, `cannot resolve HOST: ...`, or `no answer yet`.
    var lastDescription: String {
        guard let hostPath = latest.answer.withLock({ $0 }) else { return "no answer yet" }
        if let path = hostPath.path { return PathText.summary(path) }
        return "cannot resolve \(PathText.escaped(hostPath.host)): \(PathText.escaped(hostPath.resolutionFailure ?? "no address"))"
    }

    func stop() { relay.cancel() }
}
