import LinuxReachability

/// `wait --dns`: asks the resolvers of /etc/resolv.conf, in order, until one answers.
struct WaitDNSCheck: Sendable {
    /// Where the system's resolvers are listed; under `ip netns exec NAME`, /etc/netns/NAME/resolv.conf
    /// is mounted over it, so `--netns` gets the namespace's own.
    static let resolverFile = "/etc/resolv.conf"
    /// How long one server gets to answer: a resolver on the link answers in milliseconds, one
    /// that forwards upstream in well under a second; a lost datagram is asked again next round.
    static let queryTimeout = Duration.seconds(1)
    /// The pause between rounds while no server answers.
    static let retryInterval = Duration.seconds(1)

    /// The name asked for (`.` asks for the root's NS records).
    var name: String
    /// Reads the resolver file (the command context's, so tests can hand one in).
    var readFile: @Sendable (String) throws -> String?
    /// Sends one query (the real one is `ResolverProbe.ask`).
    var ask: @Sendable (_ server: String, _ name: String, _ timeout: Duration) async -> ResolverProbe.Answer

    /// One round: every server in turn until one answers.
    func round() async -> WaitPlan.DNSState {
        let text: String?
        do {
            text = try readFile(Self.resolverFile)
        } catch {
            return .noResolver("cannot read \(Self.resolverFile)")
        }
        let servers = ResolverProbe.nameservers(inResolverConfiguration: text ?? "")
        guard !servers.isEmpty else { return .noResolver("no nameserver in \(Self.resolverFile)") }
        var failures: [String] = []
        for server in servers {
            switch await ask(server, name, Self.queryTimeout) {
            case .answered: return .answered(server: server)
            case .failed(let code): failures.append("\(server) answered \(Self.codeName(code))")
            case .silent(let reason): failures.append("\(server) \(reason)")
            }
        }
        return .unanswered(failures)
    }

    /// RFC 1035/2136 names of the failure codes a resolver sends.
    static func codeName(_ code: Int) -> String {
        switch code {
        case 1: return "FORMERR"
        case 2: return "SERVFAIL"
        case 4: return "NOTIMP"
        case 5: return "REFUSED"
        default: return "response code \(code)"
        }
    }
}
