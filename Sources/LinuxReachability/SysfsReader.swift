import LinuxSystem

/// Reads interface facts from a sysfs directory fd.
///
/// The fd is `/sys` for the current namespace, or a private sysfs mount made inside another
/// namespace (after setns, `/sys` still describes the namespace it was mounted in).
final class SysfsReader: Sendable {
    let rootDescriptor: FileDescriptor

    init(rootDescriptor: FileDescriptor) {
        self.rootDescriptor = rootDescriptor
    }

    /// The host's `/sys`.
    static func host() -> SysfsReader? {
        (try? FileDescriptor.openForReading("/sys", isDirectory: true)).map(SysfsReader.init)
    }

    deinit { rootDescriptor.close() }

    /// Completes netlink facts with DEVTYPE, wireless presence and the driver.
    func facts(for link: LinkInfo) -> InterfaceFacts {
        let base = "class/net/\(link.name)"
        var facts = InterfaceFacts(name: link.name, hardwareType: link.hardwareType, linkKind: link.kind,
                                   isLoopback: link.isLoopback)
        guard !link.name.isEmpty, !link.name.contains("/"), link.name != ".", link.name != ".." else { return facts }
        if let uevent = readFile("\(base)/uevent") {
            for line in uevent.split(separator: "\n") where line.hasPrefix("DEVTYPE=") {
                facts.deviceType = String(line.dropFirst("DEVTYPE=".count))
            }
        }
        facts.hasWirelessDirectory = exists("\(base)/wireless") || exists("\(base)/phy80211")
        if let target = readLink("\(base)/device/driver") {
            facts.driver = target.split(separator: "/").last.map(String.init)
        }
        return facts
    }

    private func exists(_ path: String) -> Bool {
        rootDescriptor.exists(at: path)
    }

    /// The first 4 KiB of a sysfs attribute (they are one line or a few).
    private func readFile(_ path: String) -> String? {
        guard let file = try? FileDescriptor.openForReading(path, relativeTo: rootDescriptor) else { return nil }
        defer { file.close() }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = buffer.withUnsafeMutableBytes { raw in (try? file.read(into: raw)) ?? 0 }
        guard count > 0 else { return nil }
        return String(decoding: buffer[0..<count], as: UTF8.self)
    }

    private func readLink(_ path: String) -> String? {
        guard let target = try? rootDescriptor.readLink(at: path), !target.isEmpty else { return nil }
        return target
    }
}
