import FoundationEssentials
import LinuxSystem
import ReachabilityBase

/// One address a host stands for, with the link a link-local address is scoped to.
struct HostTarget: Hashable, Sendable {
    /// 4 or 16 bytes.
    var address: [UInt8]
    /// The zone of a scoped address (`fe80::1%eth0`), by interface name.
    var zone: String?

    var presentation: String {
        let text = IPAddress.format(address) ?? "?"
        return zone.map { "\(text)%\($0)" } ?? text
    }
}

/// The hosts whose routes the monitor follows, and when their names must be resolved. Pure: the
/// engine feeds it subscriptions, resolver answers, primary path changes and the clock, and does
/// the resolving and the route lookups.
///
/// - An IP literal needs no resolver; a name is resolved when it is first watched, again after
///   every change of the primary path (another network may answer with other addresses; the old
///   addresses are kept meanwhile), and after a failure on a back-off from 1 s doubling to 30 s.
/// - A first lookup that has not answered within `firstAnswerTimeout` (a resolver that drops
///   queries: glibc tries each name server for 5 s, twice) is reported as failed meanwhile, so
///   whoever waits for the host's first answer is not left waiting in silence; the lookup goes on.
/// - At most `maximumConcurrentResolutions` lookups run at once (each is a thread: getaddrinfo
///   cannot be cancelled or polled).
/// - A name stands for at most `maximumTargets` addresses (a round-robin name with hundreds of
///   records costs no more than eight route lookups per evaluation).
struct HostWatches: Sendable {
    enum Resolution: Sendable, Hashable {
        case pending
        case resolved
        case failed(String)
    }

    struct Watch: Sendable {
        /// Subscriptions (streams) that asked for this host.
        var subscribers = 0
        /// Whether the host is an IP literal (never resolved).
        var isLiteral: Bool
        var targets: [HostTarget]
        var resolution: Resolution
        /// A resolver thread runs for it.
        var isResolving = false
        /// A resolution is wanted (first time, after a path change, or a retry that is due).
        var wantsResolution: Bool
        /// A failed resolution is retried then.
        var retryAt: ContinuousClock.Instant?
        var retryDelay: Duration?
        /// Until the first answer: when it is given up on for the time being.
        var firstAnswerDue: ContinuousClock.Instant?
    }

    static let maximumTargets = 8
    static let maximumConcurrentResolutions = 4
    static let firstAnswerTimeout = Duration.seconds(10)
    static let initialRetry = Duration.seconds(1)
    static let maximumRetry = Duration.seconds(30)

    private(set) var watches: [String: Watch] = [:]

    /// The key a host is watched under: lowercased, without brackets; nil for text that is not a
    /// host name or an IP literal (so nothing odd reaches the resolver).
    static func key(for host: String) -> String? {
        var text = Substring(host)
        if text.hasPrefix("["), text.hasSuffix("]") { text = text.dropFirst().dropLast() }
        if text.hasSuffix("."), text.count > 1, IPAddress.parse(String(text.dropLast())) == nil { text = text.dropLast() }
        guard !text.isEmpty, text.utf8.count <= 253 else { return nil }
        if literal(String(text)) != nil { return String(text) }
        let allowed = text.unicodeScalars.allSatisfy {
            ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || $0 == "-" || $0 == "." || $0 == "_"
        }
        return allowed ? text.lowercased() : nil
    }

    /// `10.77.0.1`, `2001:db8::1`, `fe80::1%eth0` (`%25` as in a URL, too).
    static func literal(_ text: String) -> HostTarget? {
        var address = Substring(text)
        var zone: String?
        if let percent = text.firstIndex(of: "%") {
            address = text[..<percent]
            var name = text[text.index(after: percent)...]
            if name.hasPrefix("25"), name.count > 2 { name = name.dropFirst(2) }
            guard !name.isEmpty, name.utf8.count <= 15,
                  name.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F && $0 != "/" }) else { return nil }
            zone = String(name)
        }
        guard let bytes = IPAddress.parse(String(address)) else { return nil }
        if zone != nil, bytes.count != 16 { return nil }
        return HostTarget(address: bytes, zone: zone)
    }

    /// A subscription to `key` (from `key(for:)`) at `now`; returns whether the host is new.
    mutating func add(_ key: String, at now: ContinuousClock.Instant = .now) -> Bool {
        if watches[key] != nil {
            watches[key]!.subscribers += 1
            return false
        }
        if let literal = Self.literal(key) {
            watches[key] = Watch(subscribers: 1, isLiteral: true, targets: [literal], resolution: .resolved, wantsResolution: false)
        } else {
            watches[key] = Watch(subscribers: 1, isLiteral: false, targets: [], resolution: .pending, wantsResolution: true,
                                 firstAnswerDue: now + Self.firstAnswerTimeout)
        }
        return true
    }

    /// A subscription ended; returns whether the host is no longer watched.
    mutating func remove(_ key: String) -> Bool {
        guard var watch = watches[key] else { return false }
        watch.subscribers -= 1
        if watch.subscribers > 0 {
            watches[key] = watch
            return false
        }
        watches[key] = nil
        return true
    }

    /// The primary path moved: names are resolved again (their old addresses stay until the answer).
    mutating func primaryPathChanged() {
        for key in watches.keys where !watches[key]!.isLiteral {
            watches[key]!.wantsResolution = true
            watches[key]!.retryAt = nil
        }
    }

    /// Names whose resolution should start now, marked as resolving; at most the free slots.
    mutating func resolutionsToStart(at now: ContinuousClock.Instant) -> [String] {
        var running = watches.values.filter(\.isResolving).count
        var started: [String] = []
        for key in watches.keys.sorted() where running < Self.maximumConcurrentResolutions {
            guard var watch = watches[key], !watch.isLiteral, !watch.isResolving else { continue }
            if let retryAt = watch.retryAt, retryAt <= now { watch.wantsResolution = true; watch.retryAt = nil }
            guard watch.wantsResolution else { continue }
            watch.wantsResolution = false
            watch.isResolving = true
            watches[key] = watch
            started.append(key)
            running += 1
        }
        return started
    }

    /// A resolver answered for `key`; returns whether its targets or resolution changed.
    mutating func resolved(_ key: String, _ answer: Result<[[UInt8]], SocketAddress.ResolveFailure>, at now: ContinuousClock.Instant) -> Bool {
        guard var watch = watches[key] else { return false }
        watch.isResolving = false
        watch.firstAnswerDue = nil
        let before = (watch.targets, watch.resolution)
        switch answer {
        case .success(let addresses):
            var targets: [HostTarget] = []
            for address in addresses where !targets.contains(where: { $0.address == address }) && targets.count < Self.maximumTargets {
                targets.append(HostTarget(address: address, zone: nil))
            }
            if targets.isEmpty {
                fail(&watch, "no addresses", now: now)
            } else {
                watch.targets = targets
                watch.resolution = .resolved
                watch.retryDelay = nil
                watch.retryAt = nil
            }
        case .failure(let failure):
            fail(&watch, failure.message, now: now)
        }
        watches[key] = watch
        return before.0 != watch.targets || before.1 != watch.resolution
    }

    private func fail(_ watch: inout Watch, _ message: String, now: ContinuousClock.Instant) {
        let delay = ExponentialBackoff(initial: Self.initialRetry, maximum: Self.maximumRetry).delay(after: watch.retryDelay)
        watch.retryDelay = delay
        watch.retryAt = now + delay
        // A name that resolved before keeps its addresses: a resolver that stops answering is not
        // a route that went away (downloads go on while curl's own lookups still work).
        if watch.targets.isEmpty { watch.resolution = .failed(message) }
    }

    /// First lookups still unanswered at `now` past `firstAnswerTimeout`: reported as failed
    /// (the lookup goes on); returns whether any was.
    mutating func expireFirstAnswers(at now: ContinuousClock.Instant) -> Bool {
        var expired = false
        for key in watches.keys {
            guard let due = watches[key]!.firstAnswerDue, due <= now else { continue }
            watches[key]!.firstAnswerDue = nil
            if watches[key]!.resolution == .pending {
                watches[key]!.resolution = .failed("no answer from the resolver within \(Self.firstAnswerTimeout.components.seconds) s")
                expired = true
            }
        }
        return expired
    }

    /// When the next failed resolution, or a first answer, is due.
    var deadline: ContinuousClock.Instant? {
        watches.values.flatMap { [$0.isResolving ? nil : $0.retryAt, $0.firstAnswerDue].compactMap { $0 } }.min()
    }

    /// Every address watched, as prefixes for the event filter and route-change tests.
    var prefixes: [RoutePrefix] {
        var seen = Set<RoutePrefix>()
        var prefixes: [RoutePrefix] = []
        for key in watches.keys.sorted() {
            for target in watches[key]!.targets {
                if let prefix = RoutePrefix(address: target.address), seen.insert(prefix).inserted { prefixes.append(prefix) }
            }
        }
        return prefixes
    }
}
