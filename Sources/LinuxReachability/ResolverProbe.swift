import LinuxSystem
import ReachabilityBase

/// Whether a DNS resolver answers: one query over UDP, the answer read from its header only.
///
/// A wait-online that says "online" while no resolver answers lets the first `apt` or `git` fail
/// anyway; `reachability wait --dns` asks the resolvers of /etc/resolv.conf before it says so.
/// Pure parts (the query, the reply check, resolv.conf) are static and tested without sockets.
public enum ResolverProbe {
    /// What one query found.
    public enum Answer: Sendable, Hashable {
        /// The server answered (NOERROR or NXDOMAIN: it resolved, whatever the name).
        case answered
        /// The server answered, but with a failure code (SERVFAIL, REFUSED, ...): it cannot resolve.
        case failed(responseCode: Int)
        /// Nothing came back before the deadline, or the datagram could not be sent.
        case silent(reason: String)
    }

    /// The `nameserver` addresses of a resolv.conf text, in order, IP literals only (a scope
    /// `%zone` is dropped with its link: the monitor's route lookup picks the link).
    public static func nameservers(inResolverConfiguration text: String) -> [String] {
        var servers: [String] = []
        for line in text.split(whereSeparator: \.isNewline) {
            let words = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
            guard words.count >= 2, words[0] == "nameserver" else { continue }
            let address = String(words[1].split(separator: "%", maxSplits: 1)[0])
            if IPAddress.parse(address) != nil, !servers.contains(address) { servers.append(address) }
        }
        return servers
    }

    /// A recursive query for `name`'s NS records (`.` asks for the root's), or nil when the name
    /// does not fit DNS (a label over 63 bytes, a name over 253, an empty label).
    public static func query(identifier: UInt16, name: String) -> [UInt8]? {
        var bytes: [UInt8] = [UInt8(identifier >> 8), UInt8(identifier & 0xFF), 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]
        let trimmed = name.hasSuffix(".") ? String(name.dropLast()) : name
        guard trimmed.utf8.count <= 253 else { return nil }
        if !trimmed.isEmpty {
            for label in trimmed.split(separator: ".", omittingEmptySubsequences: false) {
                let utf8 = Array(label.utf8)
                guard !utf8.isEmpty, utf8.count <= 63 else { return nil }
                bytes.append(UInt8(utf8.count))
                bytes += utf8
            }
        }
        bytes += [0, 0, 2, 0, 1]  // root label, QTYPE NS, QCLASS IN
        return bytes
    }

    /// What a datagram says about the query `identifier`: nil when it is not a reply to it
    /// (too short, another identifier, not a response), so the probe keeps listening.
    public static func answer(to identifier: UInt16, reply: [UInt8]) -> Answer? {
        guard reply.count >= 12, UInt16(reply[0]) << 8 | UInt16(reply[1]) == identifier, reply[2] & 0x80 != 0 else {
            return nil
        }
        let code = Int(reply[3] & 0x0F)
        return code == 0 || code == 3 ? .answered : .failed(responseCode: code)
    }

    /// Sends one query for `name` to `server` (an IP literal, port 53) and waits up to `timeout`
    /// for its reply, on a thread of its own so the caller's task never blocks.
    public static func ask(_ server: String, name: String, timeout: Duration) async -> Answer {
        await withCheckedContinuation { continuation in
            SystemThread.detach(name: "dns probe") {
                continuation.resume(returning: askBlocking(server, name: name, timeout: timeout))
            }
        }
    }

    private static func askBlocking(_ server: String, name: String, timeout: Duration) -> Answer {
        guard let bytes = IPAddress.parse(server), let address = SocketAddress(ipAddress: bytes, port: 53) else {
            return .silent(reason: "not an IP address")
        }
        let identifier = UInt16.random(in: 1...UInt16.max)
        guard let query = query(identifier: identifier, name: name) else { return .silent(reason: "the name does not fit DNS") }
        let socket: FileDescriptor
        do {
            socket = try FileDescriptor.udpSocket(address.family)
        } catch {
            return .silent(reason: "cannot open a UDP socket: \(error)")
        }
        defer { socket.close() }
        let deadline = ContinuousClock.now + timeout
        do {
            try socket.send(query, to: address)
            while true {
                let left = ContinuousClock.now.duration(to: deadline)
                guard left > .zero else { return .silent(reason: "did not answer") }
                var entries = [PollEntry(socket, .readable)]
                try Poll.wait(&entries, timeoutMilliseconds: Int32(max(1, min(left.millisecondsRoundedUp, 60_000))))
                guard entries[0].isReady else { continue }
                let reply = try socket.receive(maximum: 4096)
                if let answer = answer(to: identifier, reply: reply) { return answer }
            }
        } catch {
            return .silent(reason: "did not answer (\(error))")
        }
    }
}

extension ConnectivityCheck {
    /// The name the check's URL resolves, or nil when it names an IP address: the name
    /// `reachability wait --dns` asks a resolver for, since it is the one the check needs.
    public var hostName: String? {
        let host = target.host.hasPrefix("[") ? String(target.host.dropFirst().dropLast()) : target.host
        return IPAddress.parse(host) == nil ? host : nil
    }
}
