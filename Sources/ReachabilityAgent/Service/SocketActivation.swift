import LinuxSystem
import ReachabilityBase

/// systemd socket activation (sd_listen_fds(3)), by hand: a `.socket` unit binds
/// `agent.sock` and starts the agent on the first connection, passing the listening socket as
/// descriptor 3 with `LISTEN_PID` (this process) and `LISTEN_FDS` (how many) in the
/// environment. The agent then serves that socket instead of binding its own, and leaves the
/// file alone when it stops: systemd owns it and starts the agent again on the next connection.
package enum SocketActivation {
    /// The first passed descriptor (`SD_LISTEN_FDS_START`).
    package static let firstDescriptor = FileDescriptor(rawValue: 3)

    /// The number of descriptors passed to process `pid`, or nil when the environment does not
    /// pass any to it (no variables, another process's, or malformed values). Pure.
    package static func passedDescriptorCount(environment: [String: String], pid: Int32) -> Int? {
        guard let owner = environment["LISTEN_PID"].flatMap(processID.value(from:)), owner == Int(pid),
              let count = environment["LISTEN_FDS"].flatMap(descriptorCount.value(from:)) else { return nil }
        return count
    }

    /// `LISTEN_PID`: a process identifier, in decimal digits alone.
    static let processID = Count(1...Int(Int32.max))
    /// `LISTEN_FDS`: how many descriptors, in decimal digits alone (more than 64 is not systemd's).
    static let descriptorCount = Count(1...64)

    /// What was passed, checked.
    package enum Outcome: Equatable {
        /// Nothing was passed: bind the socket as usual.
        case none
        /// A listening Unix stream socket bound to `path` (descriptor 3, now close-on-exec).
        case listener(descriptor: FileDescriptor, path: String)
        /// Something was passed that the agent cannot serve; the message says what.
        case unusable(String)
    }

    /// Checks what systemd passed to this process and forgets the variables, so no child takes
    /// the descriptors for its own (`sd_listen_fds(1)`).
    package static func take(environment: [String: String], pid: Int32 = CurrentProcess.id) -> Outcome {
        guard let count = passedDescriptorCount(environment: environment, pid: pid) else { return .none }
        for name in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] { CurrentProcess.removeEnvironmentVariable(name) }
        guard count == 1 else {
            return .unusable("systemd passed \(count) sockets; the agent serves one (one ListenStream= in its .socket unit)")
        }
        let descriptor = firstDescriptor
        do {
            guard let path = try descriptor.listeningUnixStreamPath() else {
                return .unusable("the socket systemd passed is not a listening Unix stream socket with a path (ListenStream=/path/agent.sock, Accept=no)")
            }
            try descriptor.setCloseOnExec()
            return .listener(descriptor: descriptor, path: path)
        } catch {
            return .unusable("cannot inspect the socket systemd passed: \(error)")
        }
    }
}
