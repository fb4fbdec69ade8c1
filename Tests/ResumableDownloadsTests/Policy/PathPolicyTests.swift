import LinuxReachability
import Testing
import TestSupport
@testable import ResumableDownloads

@Suite("Path policy")
struct PathPolicyTests {
    @Test func noSourceMeansUsable() {
        #expect(PathPolicy.usability(of: nil, hasPathSource: false, access: PathAccess(allowsExpensive: false)) == .usable(pinnedInterface: nil))
        #expect(PathPolicy.usability(of: nil, hasPathSource: true, access: PathAccess(allowsExpensive: true)) == .unknown)
    }

    @Test func unsatisfiedIsUnusable() {
        #expect(PathPolicy.usability(of: Paths.offline, hasPathSource: true, access: PathAccess(allowsExpensive: true)) == .unusable)
    }

    @Test func expensivePathsRespectTheOption() {
        let cellularOnly = Paths.satisfied(via: Paths.cellular)
        #expect(PathPolicy.usability(of: cellularOnly, hasPathSource: true, access: PathAccess(allowsExpensive: true)) == .usable(pinnedInterface: nil))
        #expect(PathPolicy.usability(of: cellularOnly, hasPathSource: true, access: PathAccess(allowsExpensive: false)) == .unusable)
        let cellularWithWifi = Paths.satisfied(via: Paths.cellular, also: [Paths.wifi])
        #expect(PathPolicy.usability(of: cellularWithWifi, hasPathSource: true, access: PathAccess(allowsExpensive: false))
                == .usable(pinnedInterface: "wlan0"))
    }

    @Test func interfaceOrAddressChangesAbort() {
        let wifi = Paths.satisfied(via: Paths.wifi)
        let key = PathKey(wifi)
        #expect(!PathPolicy.mustAbort(startedUnder: key, pinnedInterface: nil, access: PathAccess(allowsExpensive: true), newPath: wifi))
        #expect(PathPolicy.mustAbort(startedUnder: key, pinnedInterface: nil, access: PathAccess(allowsExpensive: true), newPath: Paths.offline))
        #expect(PathPolicy.mustAbort(startedUnder: key, pinnedInterface: nil, access: PathAccess(allowsExpensive: true),
                                     newPath: Paths.satisfied(via: Paths.ethernet)))
        #expect(PathPolicy.mustAbort(startedUnder: key, pinnedInterface: nil, access: PathAccess(allowsExpensive: true),
                                     newPath: Paths.satisfied(via: Paths.wifi, source: "192.168.1.99")))
        // wifi -> cellular for a download that refuses expensive paths
        #expect(PathPolicy.mustAbort(startedUnder: key, pinnedInterface: nil, access: PathAccess(allowsExpensive: false),
                                     newPath: Paths.satisfied(via: Paths.cellular)))
    }

    @Test func pinnedTransfersSurviveUntilTheirInterfaceGoes() {
        let key = PathKey(Paths.satisfied(via: Paths.cellular, also: [Paths.wifi]))
        #expect(!PathPolicy.mustAbort(startedUnder: key, pinnedInterface: "wlan0", access: PathAccess(allowsExpensive: false),
                                      newPath: Paths.satisfied(via: Paths.cellular, source: "10.64.0.9", also: [Paths.wifi])))
        #expect(PathPolicy.mustAbort(startedUnder: key, pinnedInterface: "wlan0", access: PathAccess(allowsExpensive: false),
                                     newPath: Paths.satisfied(via: Paths.cellular)))
    }
}

@Suite("Path policy with NetworkManager's metered links and ModemManager's roaming")
struct CostPathPolicyTests {
    static let meteredWifi = NetworkInterface(name: "wlan0", index: 3, type: .wifi, classificationReason: "test", isUp: true,
                                              hasCarrier: true, addresses: ["192.168.43.20"], isExpensive: true,
                                              costReason: "NetworkManager: Metered=guess-yes", metered: .guessYes)
    static let roamingModem = NetworkInterface(name: "wwan0", index: 4, type: .cellular, classificationReason: "test", isUp: true,
                                               hasCarrier: true, addresses: ["10.64.0.2"],
                                               cellular: CellularStatus(isRoaming: true, registration: "roaming", accessTechnologies: ["lte"]))

    @Test func aMeteredWifiIsExpensive() {
        let path = Paths.satisfied(via: Self.meteredWifi)
        #expect(path.isExpensive)
        #expect(PathPolicy.usability(of: path, hasPathSource: true, access: PathAccess(allowsExpensive: false)) == .unusable)
        #expect(PathPolicy.usability(of: path, hasPathSource: true, access: PathAccess()) == .usable(pinnedInterface: nil))
        // Another link the download may use is up: pinned to it.
        #expect(PathPolicy.usability(of: Paths.satisfied(via: Self.meteredWifi, also: [Paths.ethernet]), hasPathSource: true,
                                     access: PathAccess(allowsExpensive: false)) == .usable(pinnedInterface: "eth0"))
    }

    @Test func theSameWifiTurningMeteredStopsATransferThatRefusesExpensivePaths() {
        let key = PathKey(Paths.satisfied(via: Paths.wifi))
        let metered = Paths.satisfied(via: NetworkInterface(name: "wlan0", index: 3, type: .wifi, classificationReason: "test",
                                                            isUp: true, hasCarrier: true, addresses: ["192.168.1.20"],
                                                            isExpensive: true, metered: .guessYes))
        #expect(PathPolicy.mustAbort(startedUnder: key, pinnedInterface: nil, access: PathAccess(allowsExpensive: false), newPath: metered))
        #expect(!PathPolicy.mustAbort(startedUnder: key, pinnedInterface: nil, access: PathAccess(), newPath: metered),
                "the same interface and address keep their sockets for a transfer that may use metered links")
        // A pinned transfer stops when its own interface turns metered.
        let pinnedKey = PathKey(Paths.satisfied(via: Paths.cellular, also: [Paths.wifi]))
        #expect(PathPolicy.mustAbort(startedUnder: pinnedKey, pinnedInterface: "wlan0", access: PathAccess(allowsExpensive: false),
                                     newPath: Paths.satisfied(via: Paths.cellular, also: [Self.meteredWifi])))
    }

    @Test func roamingIsAllowedUnlessRefused() {
        let path = Paths.satisfied(via: Self.roamingModem)
        #expect(path.isRoaming && path.isExpensive)
        #expect(PathPolicy.usability(of: path, hasPathSource: true, access: PathAccess()) == .usable(pinnedInterface: nil))
        #expect(PathPolicy.usability(of: path, hasPathSource: true, access: PathAccess(allowsRoaming: false)) == .unusable)
        #expect(PathPolicy.usability(of: Paths.satisfied(via: Self.roamingModem, also: [Paths.cellular.renamed("wwan1", 5)]),
                                     hasPathSource: true, access: PathAccess(allowsRoaming: false)) == .usable(pinnedInterface: "wwan1"),
                "a home-network modem is fine when only roaming is refused")
        #expect(PathPolicy.mustAbort(startedUnder: PathKey(Paths.satisfied(via: Paths.cellular)), pinnedInterface: nil,
                                     access: PathAccess(allowsRoaming: false),
                                     newPath: Paths.satisfied(via: Self.roamingModem.renamed("wwan0", 4))))
    }

    /// A wifi the user marked metered on the connection (Metered=yes): constrained, as Apple's Low
    /// Data Mode is; a hotspot NetworkManager guessed (guess-yes) is expensive only; an override
    /// saying the interface is not expensive clears both.
    @Test func aConnectionMarkedMeteredIsConstrained() {
        let marked = NetworkInterface(name: "wlan0", index: 3, type: .wifi, classificationReason: "test", isUp: true,
                                      hasCarrier: true, addresses: ["192.168.1.20"], isExpensive: true,
                                      costReason: "NetworkManager: Metered=yes (set on the connection)", metered: .yes)
        let path = Paths.satisfied(via: marked)
        #expect(path.isConstrained && path.isExpensive)
        #expect(!Paths.satisfied(via: Self.meteredWifi).isConstrained)
        var overridden = marked
        overridden.isExpensive = false
        #expect(!Paths.satisfied(via: overridden).isConstrained)
        #expect(PathPolicy.usability(of: path, hasPathSource: true, access: PathAccess()) == .usable(pinnedInterface: nil))
        #expect(PathPolicy.usability(of: path, hasPathSource: true, access: PathAccess(allowsConstrained: false)) == .unusable)
        #expect(PathPolicy.usability(of: Paths.satisfied(via: Self.meteredWifi), hasPathSource: true,
                                     access: PathAccess(allowsConstrained: false)) == .usable(pinnedInterface: nil),
                "a guessed hotspot is not constrained")
        #expect(PathPolicy.usability(of: Paths.satisfied(via: marked, also: [Paths.cellular]), hasPathSource: true,
                                     access: PathAccess(allowsConstrained: false)) == .usable(pinnedInterface: "wwan0"),
                "refusing constrained links alone leaves expensive ones usable")
        #expect(PathPolicy.mustAbort(startedUnder: PathKey(Paths.satisfied(via: Paths.wifi)), pinnedInterface: nil,
                                     access: PathAccess(allowsConstrained: false), newPath: path))
    }
}

extension NetworkInterface {
    func renamed(_ name: String, _ index: Int32) -> NetworkInterface {
        var copy = self
        copy.name = name
        copy.index = index
        return copy
    }
}

@Suite("Path policy with a connectivity check")
struct ConnectivityPathPolicyTests {
    func checked(_ connectivity: Connectivity) -> NetworkPath {
        var path = Paths.satisfied(via: Paths.ethernet)
        path.connectivity = connectivity
        path.portalURL = connectivity == .portal ? "http://portal/login" : nil
        path.connectivityEvidence = ConnectivityEvidence(url: "http://192.0.2.9/", time: nil, answer: "test")
        return path
    }

    @Test func aPortalIsWaitedOutAndFullIsUsable() {
        #expect(PathPolicy.usability(of: checked(.portal), hasPathSource: true, access: PathAccess(allowsExpensive: true)) == .unusable)
        #expect(PathPolicy.usability(of: checked(.full), hasPathSource: true, access: PathAccess(allowsExpensive: true)) == .usable(pinnedInterface: nil))
        // limited may be the probe server alone: downloads go on (and retry as they would).
        #expect(PathPolicy.usability(of: checked(.limited), hasPathSource: true, access: PathAccess(allowsExpensive: true)) == .usable(pinnedInterface: nil))
        // The first answer is pending: wait quietly (milliseconds), do not fetch a login page.
        #expect(PathPolicy.usability(of: checked(.unknown), hasPathSource: true, access: PathAccess(allowsExpensive: true)) == .unknown)
        // No check configured: as before.
        #expect(PathPolicy.usability(of: Paths.satisfied(via: Paths.ethernet), hasPathSource: true, access: PathAccess(allowsExpensive: true))
                == .usable(pinnedInterface: nil))
        // A transfer running when the portal appears is stopped (the same route, a new answer).
        #expect(PathPolicy.mustAbort(startedUnder: PathKey(checked(.full)), pinnedInterface: nil, access: PathAccess(allowsExpensive: true),
                                     newPath: checked(.portal)))
    }
}
