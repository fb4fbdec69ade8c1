// Placeholder replaced by the netlink engine.
final class MonitorEngine: Sendable {
    init(configuration: PathMonitor.Configuration, publish: @escaping @Sendable (NetworkPath) -> Void) throws {}
    func start() throws {}
    func cancel() {}
}
