import ReachabilityBase

/// A failure of the path monitor, with a readable description.
///
/// Errors compare by kind, so `error == .namespaceNotFound` works whatever the message.
public struct ReachabilityError: Error, Sendable, Hashable, CustomStringConvertible {
    enum Code: Hashable, Sendable {
        case netlink
        case namespaceNotFound
        case permissionDenied
        case invalidOverride
        case invalidConfiguration
        case systemBus
    }

    /// The kind, and what went wrong for people; the error compares and hashes as its kind.
    let kind: ErrorKind<Code>
    /// What went wrong, for people.
    public var description: String { kind.description }
    var code: Code { kind.code }

    init(_ code: Code, _ description: String) {
        kind = ErrorKind(code, description)
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
}
