/// Splits a connection's bytes into request lines and decides, per line, whether to handle it or
/// answer with an error. Pure: the socket owner feeds bytes and performs the returned actions.
package struct ControlConnectionStateMachine: Sendable {
    /// What the owner must do, in order.
    package enum Action: Sendable, Equatable {
        /// Run the command and send its reply.
        case handle(ControlRequestID?, ControlCommand)
        /// Send this reply as is.
        case reply(ControlResponse)
        /// Close the connection.
        case close
    }

    private enum State: Sendable { case reading, discardingOversizedLine, closed }

    private var state = State.reading
    private var buffer: [UInt8] = []

    /// Whether part of a request line has arrived (its deadline runs from its first byte).
    package var isInsideRequest: Bool { state == .discardingOversizedLine || (state == .reading && !buffer.isEmpty) }
    package let maximumLineLength: Int

    package init(maximumLineLength: Int = ControlProtocol.maximumRequestSize) {
        self.maximumLineLength = maximumLineLength
    }

    /// Bytes arrived.
    package mutating func received(_ bytes: some Collection<UInt8>) -> [Action] {
        var actions: [Action] = []
        for byte in bytes {
            switch state {
            case .closed:
                return actions
            case .discardingOversizedLine:
                if byte == UInt8(ascii: "\n") { state = .reading }
            case .reading:
                if byte == UInt8(ascii: "\n") {
                    actions += lineEnded()
                } else if buffer.count >= maximumLineLength {
                    // Answer once, then skip to the next newline: framing survives, memory stays bounded.
                    buffer = []
                    state = .discardingOversizedLine
                    actions.append(.reply(.failure(.tooLarge(), id: nil)))
                } else {
                    buffer.append(byte)
                }
            }
        }
        return actions
    }

    /// The peer closed its side (or the read failed); an unterminated last line is still handled.
    package mutating func endOfInput() -> [Action] {
        guard state != .closed else { return [] }
        var actions: [Action] = []
        if state == .reading, !buffer.isEmpty { actions += lineEnded() }
        state = .closed
        return actions + [.close]
    }

    private mutating func lineEnded() -> [Action] {
        var line = buffer[...]
        buffer = []
        if line.last == UInt8(ascii: "\r") { line = line.dropLast() }
        if line.allSatisfy({ $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") }) { return [] }
        switch ControlCodec.decodeRequest(line) {
        case .success(let (id, command)): return [.handle(id, command)]
        case .failure(let rejection): return [.reply(.failure(rejection.error, id: rejection.id))]
        }
    }
}
