import LinuxSystem
import Synchronization

/// Open files a peer passes with its request (SCM_RIGHTS): `queue add --upload` hands the agent
/// the file it opened itself, so the agent reads only what the caller could read (and sees the
/// caller's file even where its own mount namespace differs: `ProtectHome=`, `PrivateTmp=`).
extension ControlPeer {
    /// The most descriptors a connection holds unclaimed; more are closed at once, so a peer
    /// cannot fill the agent's descriptor table.
    static let maximumHeldDescriptors = 4

    /// Keeps descriptors that arrived with the peer's bytes until a request claims them; they are
    /// closed when the connection ends unclaimed.
    func keep(_ descriptors: [FileDescriptor]) {
        guard !descriptors.isEmpty else { return }
        let excess = state.withLock { state -> [FileDescriptor] in
            guard !state.isClosed else { return descriptors }
            let room = max(0, Self.maximumHeldDescriptors - state.descriptors.count)
            state.descriptors += descriptors.prefix(room)
            return Array(descriptors.dropFirst(room))
        }
        for descriptor in excess { descriptor.close() }
    }

    /// The oldest descriptor the peer passed and no request has claimed; the caller owns it.
    package func takeDescriptor() -> FileDescriptor? {
        state.withLock { state in state.descriptors.isEmpty ? nil : state.descriptors.removeFirst() }
    }
}
