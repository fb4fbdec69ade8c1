/// Whether an interface costs money, and the evidence, from its classification and what
/// NetworkManager says about it. Pure.
///
/// Strongest first:
/// 1. a user override (`--classify`, classify.conf) decides: expensive exactly when it says
///    `cellular`, whatever NetworkManager says;
/// 2. NetworkManager's `Metered=yes` / `no`, set on the connection by the user;
/// 3. NetworkManager's `Metered=guess-yes` (a hotspot's DHCP `ANDROID_METERED`, an iPhone's
///    beacon, a modem): expensive, as GLib's `network-metered` reads it;
/// 4. otherwise cellular-like interfaces are expensive (`guess-no` does not clear an
///    `ipheth`-tethered phone, which NetworkManager takes for plain Ethernet).
enum InterfaceCost {
    static func decide(_ classification: Classification, facts: SystemFacts.Interface?) -> (isExpensive: Bool, reason: String) {
        let metered = facts?.networkManager?.metered
        let networkManager = metered.map { "NetworkManager: Metered=\($0.rawValue)" }
        if classification.isOverride {
            let unused = networkManager.map { " (\($0) not used)" } ?? ""
            return (classification.type == .cellular,
                    (classification.type == .cellular ? "cellular by " : "not cellular by ") + classification.reason + unused)
        }
        switch metered {
        case .yes?:
            return (true, "NetworkManager: Metered=yes (set on the connection)")
        case .no?:
            return (false, "NetworkManager: Metered=no (set on the connection)")
        case .guessYes?:
            return (true, "NetworkManager: Metered=guess-yes" + (facts?.meteredHint.map { " (\($0))" } ?? ""))
        case .guessNo?, .unknown?, nil:
            let tail = networkManager.map { ", \($0)" } ?? ""
            return classification.type == .cellular
                ? (true, "cellular-like (\(classification.reason))" + tail)
                : (false, "not cellular-like" + tail)
        }
    }
}
