import Dispatch
// Foundation (not only FoundationEssentials) for NotificationCenter, used only by the members
// emitted into the caller's module (@_alwaysEmitIntoClient): the facade's own code links nothing
// of Foundation proper, so programs that never build a `Reachability` (the CLI) get no ICU.
import Foundation
import Synchronization

extension Notification.Name {
    /// Posted (object: the `Reachability`) when the connection changes, as in Reachability.swift.
    @_alwaysEmitIntoClient
    public static var reachabilityChanged: Notification.Name { Notification.Name("reachabilityChanged") }
}

/// A Reachability.swift-shaped facade over `PathMonitor`, so iOS code ports with few edits.
///
/// ```swift
/// let reachability = try Reachability()
/// reachability.whenReachable = { r in print(r.connection == .wifi ? "wifi" : "other") }
/// reachability.whenUnreachable = { _ in print("offline") }
/// try reachability.startNotifier()
/// ```
/// Closures run on `callbackQueue` (the main queue by default, like on iOS: a command-line
/// program must then run `dispatchMain()` or a run loop).
///
/// `Reachability(hostname:)` answers for one host, as Reachability.swift's did through
/// `SCNetworkReachabilityCreateWithName`: reachable when the kernel has a usable route to the
/// host's address (`PathMonitor.paths(to:)`), with or without a default route, so a server on the
/// local network or this host is reachable on a LAN with no Internet.
public final class Reachability: Sendable {
    /// Called with the facade when the network becomes (or stays, on another interface) reachable.
    public typealias NetworkReachable = @Sendable (Reachability) -> Void
    /// Called when the network becomes unreachable.
    public typealias NetworkUnreachable = @Sendable (Reachability) -> Void
    /// wired, wifi, cellular or unavailable.
    public typealias Connection = NetworkPath.Connection

    private struct Callbacks {
        var whenReachable: NetworkReachable?
        var whenUnreachable: NetworkUnreachable?
        var allowsCellularConnection = true
        var lastNotified: (Connection, String?)?
        /// With a host name: its latest path, and the task that follows it.
        var hostPath: HostPath?
        var hostRelay: Task<Void, Never>?
    }

    private let monitor: PathMonitor
    /// The host this facade answers for; nil for the primary path.
    public let hostname: String?
    private let callbacks = Mutex(Callbacks())
    /// Queue on which the closures run and the notification is posted.
    public let callbackQueue: DispatchQueue
    /// Where `.reachabilityChanged` is posted.
    @_alwaysEmitIntoClient
    public var notificationCenter: NotificationCenter { notificationCenterObject as! NotificationCenter }
    /// The NotificationCenter, typed so this module's code needs none of Foundation proper.
    @usableFromInline let notificationCenterObject: any AnyObject & Sendable
    /// Posts `.reachabilityChanged` (a closure built in the caller's module).
    private let postChange: @Sendable (Reachability) -> Void

    /// Creates a facade; nothing is watched until `startNotifier()`.
    @_alwaysEmitIntoClient
    public convenience init(configuration: PathMonitor.Configuration = .init(), callbackQueue: DispatchQueue = .main,
                            notificationCenter: NotificationCenter = .default) {
        self.init(configuration: configuration, callbackQueue: callbackQueue, notificationCenter: notificationCenter) {
            notificationCenter.post(name: .reachabilityChanged, object: $0)
        }
    }

    /// Creates a facade that answers for `hostname` (a name or an IP address), as
    /// Reachability.swift's `init(hostname:)`; nothing is watched until `startNotifier()`.
    @_alwaysEmitIntoClient
    public convenience init(hostname: String, configuration: PathMonitor.Configuration = .init(),
                            callbackQueue: DispatchQueue = .main, notificationCenter: NotificationCenter = .default) {
        self.init(configuration: configuration, hostname: hostname, callbackQueue: callbackQueue,
                  notificationCenter: notificationCenter) {
            notificationCenter.post(name: .reachabilityChanged, object: $0)
        }
    }

    @usableFromInline
    init(configuration: PathMonitor.Configuration, hostname: String? = nil, callbackQueue: DispatchQueue,
         notificationCenter: any AnyObject & Sendable, post: @escaping @Sendable (Reachability) -> Void) {
        monitor = PathMonitor(configuration: configuration)
        self.hostname = hostname
        self.callbackQueue = callbackQueue
        notificationCenterObject = notificationCenter
        postChange = post
    }

    /// Runs when the path becomes reachable or moves to another interface.
    public var whenReachable: NetworkReachable? {
        get { callbacks.withLock { $0.whenReachable } }
        set { callbacks.withLock { $0.whenReachable = newValue } }
    }

    /// Runs when the path becomes unreachable.
    public var whenUnreachable: NetworkUnreachable? {
        get { callbacks.withLock { $0.whenUnreachable } }
        set { callbacks.withLock { $0.whenUnreachable = newValue } }
    }

    /// When false, a cellular-like path is reported as `.unavailable` (Reachability.swift's flag).
    public var allowsCellularConnection: Bool {
        get { callbacks.withLock { $0.allowsCellularConnection } }
        set { callbacks.withLock { $0.allowsCellularConnection = newValue } }
    }

    /// The full path behind the summary: the primary path, or with a host name the path to the
    /// host (unsatisfied with `noRoute` while its name has not resolved or does not).
    public var currentPath: NetworkPath {
        guard hostname != nil else { return monitor.currentPath }
        return callbacks.withLock { $0.hostPath?.path } ?? .unsatisfied(.noRoute)
    }

    /// The latest answer for the host name, with its addresses or why it did not resolve.
    public var currentHostPath: HostPath? { callbacks.withLock { $0.hostPath } }

    /// The current connection.
    public var connection: Connection {
        let connection = currentPath.connection
        return connection == .cellular && !allowsCellularConnection ? .unavailable : connection
    }

    /// How long `startNotifier()` waits for a host name's first answer.
    public static let hostResolutionWait = Duration.seconds(5)

    /// Starts watching; the matching closure runs once for the current state, then on changes.
    /// With a host name, returns once the name has its first answer (an address literal at
    /// once; a name within `hostResolutionWait`), so `connection` is meaningful right after.
    public func startNotifier() throws {
        guard let hostname else {
            monitor.pathUpdateHandler = { [weak self] _ in self?.pathChanged() }
            try monitor.start()
            pathChanged()
            return
        }
        let stream = monitor.paths(to: hostname)
        let answered = DispatchSemaphore(value: 0)
        let relay = Task { [weak self] in
            for await hostPath in stream {
                guard let self else { return }
                self.callbacks.withLock { $0.hostPath = hostPath }
                answered.signal()
                // A repeat of what startNotifier() reports is dropped by pathChanged().
                self.pathChanged()
            }
        }
        callbacks.withLock { $0.hostRelay = relay }
        do {
            try monitor.start()
        } catch {
            relay.cancel()
            throw error
        }
        let nanoseconds = Self.hostResolutionWait.components.seconds * 1_000_000_000
        _ = answered.wait(timeout: .now() + .nanoseconds(Int(nanoseconds)))
        pathChanged()
    }

    /// Stops watching; no closure runs afterwards.
    public func stopNotifier() {
        monitor.pathUpdateHandler = nil
        callbacks.withLock { $0.hostRelay }?.cancel()
        monitor.cancel()
    }

    private func pathChanged() {
        let connection = self.connection
        let interface = currentPath.primaryInterface?.name
        let (changed, action) = callbacks.withLock { state -> (Bool, (@Sendable (Reachability) -> Void)?) in
            if let last = state.lastNotified, last.0 == connection, last.1 == interface { return (false, nil) }
            state.lastNotified = (connection, interface)
            return (true, connection == .unavailable ? state.whenUnreachable : state.whenReachable)
        }
        guard changed else { return }
        callbackQueue.async { [self] in
            action?(self)
            postChange(self)
        }
    }

    deinit {
        callbacks.withLock { $0.hostRelay }?.cancel()
        monitor.cancel()
    }
}
