/// A failure of the path monitor, with a readable description.
public struct ReachabilityError: Error, Sendable, Hashable, CustomStringConvertible {
    enum Code: Hashable, Sendable {
        case netlink
        case namespaceNotFound
        case permissionDenied
        case invalidOverride
        case invalidConfiguration
        case systemBus
    }

    let code: Code
    /// What went wrong, for people.
    public let description: String

    init(_ code: Code, _ description: String) {
        self.code = code
        self.description = description
    }

    /// Opening or talking to the netlink socket failed.
    public static let netlink = ReachabilityError(.netlink, "netlink failure")
    /// The named network namespace does not exist.
    public static let namespaceNotFound = ReachabilityError(.namespaceNotFound, "network namespace not found")
    /// The operation needs privileges the process lacks.
    public static let permissionDenied = ReachabilityError(.permissionDenied, "permission denied")
    /// A classification override could not be parsed.
    public static let invalidOverride = ReachabilityError(.invalidOverride, "invalid classification override")
    /// The D-Bus system bus (NetworkManager's and ModemManager's facts) could not be used; the
    /// monitor goes on with kernel facts alone and never throws this from `start()`.
    public static let systemBus = ReachabilityError(.systemBus, "system bus failure")

    /// Errors compare by kind, so `error == .namespaceNotFound` works whatever the message.
    public static func == (lhs: ReachabilityError, rhs: ReachabilityError) -> Bool { lhs.code == rhs.code }
    public func hash(into hasher: inout Hasher) { hasher.combine(code) }
}
