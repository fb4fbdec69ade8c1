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
    }

    private let monitor: PathMonitor
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

    @usableFromInline
    init(configuration: PathMonitor.Configuration, callbackQueue: DispatchQueue,
         notificationCenter: any AnyObject & Sendable, post: @escaping @Sendable (Reachability) -> Void) {
        monitor = PathMonitor(configuration: configuration)
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

    /// The full path behind the summary.
    public var currentPath: NetworkPath { monitor.currentPath }

    /// The current connection.
    public var connection: Connection {
        let connection = monitor.currentPath.connection
        return connection == .cellular && !allowsCellularConnection ? .unavailable : connection
    }

    /// Starts watching; the matching closure runs once for the current state, then on changes.
    public func startNotifier() throws {
        monitor.pathUpdateHandler = { [weak self] _ in self?.pathChanged() }
        try monitor.start()
        pathChanged()
    }

    /// Stops watching; no closure runs afterwards.
    public func stopNotifier() {
        monitor.pathUpdateHandler = nil
        monitor.cancel()
    }

    private func pathChanged() {
        let connection = self.connection
        let interface = monitor.currentPath.primaryInterface?.name
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

    deinit { monitor.cancel() }
}
