/// The body of the package's error structs (AHC's `HTTPClientError`, NIO's `FileSystemError`
/// shape): a kind from the error's private code enum and a message for people. Compared and
/// hashed by kind alone, so an error that holds one compares as `error == .namespaceNotFound`
/// whatever its message says.
package struct ErrorKind<Code: Hashable & Sendable>: Sendable, Hashable {
    /// What kind of failure.
    package let code: Code
    /// What went wrong, for people.
    package let description: String

    /// A kind with its message.
    package init(_ code: Code, _ description: String) {
        self.code = code
        self.description = description
    }

    /// Equal when the kinds are; the messages are not compared.
    package static func == (lhs: Self, rhs: Self) -> Bool { lhs.code == rhs.code }

    /// Hashes the kind, consistently with `==`.
    package func hash(into hasher: inout Hasher) { hasher.combine(code) }
}
