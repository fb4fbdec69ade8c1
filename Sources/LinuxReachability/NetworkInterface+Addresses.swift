/// Address questions a wait-online asks of one interface ("does wlan0 have a global IPv4 address yet?").
extension NetworkInterface {
    /// The interface's addresses of `family` (both families for nil); with `routableOnly`, without
    /// link-local (169.254/16, fe80::/10) and loopback ones, which cannot carry traffic beyond the link.
    public func addresses(of family: AddressFamily?, routableOnly: Bool) -> [String] {
        addresses.filter { text in
            // The monitor stores presentation forms, maybe with a `%zone`; the zone does not change the scope.
            let bare = text.split(separator: "%", maxSplits: 1).first.map(String.init) ?? text
            guard let bytes = IPAddress.parse(bare) else { return false }
            if let family, (family == .ipv4) != (bytes.count == 4) { return false }
            return !routableOnly || !(IPAddress.isLinkLocal(bytes) || IPAddress.isLoopback(bytes))
        }
    }
}

extension NetworkInterface {
    /// Whether `name` matches the shell glob `pattern` (`*`, `?`, `[...]`), as `--ignore` and
    /// `--classify` patterns do.
    public static func name(_ name: String, matchesGlob pattern: String) -> Bool {
        ClassificationOverride(pattern: pattern, type: .other, source: "").matches(name)
    }

    /// Whether `name` can be a kernel interface name: 1-15 bytes (IFNAMSIZ is 16 with the NUL),
    /// not "." or "..", visible ASCII without '/' or ':' (the kernel refuses '/', whitespace and
    /// ':' aliases; control characters would reach terminals). The one rule every option that
    /// names an interface reads through.
    public static func isValidName(_ name: String) -> Bool {
        (1...15).contains(name.utf8.count) && name != "." && name != ".."
            && name.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "/") && $0 != UInt8(ascii: ":") }
    }
}
