import Glibc

/// Reads interface facts from a sysfs directory fd.
///
/// The fd is `/sys` for the current namespace, or a private sysfs mount made inside another
/// namespace (after setns, `/sys` still describes the namespace it was mounted in).
final class SysfsReader: Sendable {
    let rootDescriptor: Int32

    init(rootDescriptor: Int32) {
        self.rootDescriptor = rootDescriptor
    }

    /// The host's `/sys`.
    static func host() -> SysfsReader? {
        let fd = open("/sys", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        return fd < 0 ? nil : SysfsReader(rootDescriptor: fd)
    }

    deinit { close(rootDescriptor) }

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
        faccessat(rootDescriptor, path, F_OK, 0) == 0
    }

    private func readFile(_ path: String) -> String? {
        let fd = openat(rootDescriptor, path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        guard n > 0 else { return nil }
        return String(decoding: buffer[0..<n], as: UTF8.self)
    }

    private func readLink(_ path: String) -> String? {
        var buffer = [CChar](repeating: 0, count: 4096)
        let n = readlinkat(rootDescriptor, path, &buffer, buffer.count - 1)
        guard n > 0 else { return nil }
        return String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
