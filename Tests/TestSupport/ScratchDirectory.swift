import Foundation

/// A directory of the test's own, removed with everything in it when the value goes. Under /tmp
/// with a short `rch`-prefixed name (the namespaces' prefix), so a Unix socket path in it fits in
/// `sockaddr_un`'s 108 bytes. The tests' one way to make one.
public final class ScratchDirectory: Sendable {
    /// The directory.
    public let url: URL
    /// Its path.
    public var path: String { url.path }

    /// Makes `/tmp/rch-LABEL-XXXXXXXX` with `permissions` (0755 by default: a directory of
    /// root's that others may enter, as most test fixtures need).
    public init(_ label: String = "t", permissions: Int = 0o755) throws {
        url = URL(fileURLWithPath: "/tmp/rch-\(label)-\(UUID().uuidString.prefix(8).lowercased())", isDirectory: true)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: false,
                                                attributes: [.posixPermissions: permissions])
    }

    /// `name` (a relative path) inside it.
    public func url(_ name: String) -> URL { url.appendingPathComponent(name) }

    /// The path of `name` (a relative path) inside it.
    public func path(_ name: String) -> String { url(name).path }

    /// Writes `count` random bytes (`DownloadFixtures.randomData` from `seed`) to `name` inside it:
    /// the file a test sends, and the content to compare the server's copy with.
    public func randomFile(_ name: String, count: Int, seed: UInt64) throws -> (url: URL, content: Data) {
        let content = DownloadFixtures.randomData(count: count, seed: seed)
        let file = url(name)
        try content.write(to: file)
        return (file, content)
    }

    deinit { try? FileManager.default.removeItem(at: url) }
}
