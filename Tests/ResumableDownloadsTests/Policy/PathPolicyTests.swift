import LinuxReachability
import Testing
import TestSupport
@testable import ResumableDownloads

@Suite("Path policy")
struct PathPolicyTests {
    @Test func noSourceMeansUsable() {
        #expect(PathPolicy.usability(of: nil, hasPathSource: false, allowsExpensive: false) == .usable(pinnedInterface: nil))
        #expect(PathPolicy.usability(of: nil, hasPathSource: true, allowsExpensive: true) == .unknown)
    }

    @Test func unsatisfiedIsUnusable() {
        #expect(PathPolicy.usability(of: Paths.offline, hasPathSource: true, allowsExpensive: true) == .unusable)
    }

    @Test func expensivePathsRespectTheOption() {
        let cellularOnly = Paths.satisfied(via: Paths.cellular)
        #expect(PathPolicy.usability(of: cellularOnly, hasPathSource: true, allowsExpensive: true) == .usable(pinnedInterface: nil))
        #expect(PathPolicy.usability(of: cellularOnly, hasPathSource: true, allowsExpensive: false) == .unusable)
        let cellularWithWifi = Paths.satisfied(via: Paths.cellular, also: [Paths.wifi])
        #expect(PathPolicy.usability(of: cellularWithWifi, hasPathSource: true, allowsExpensive: false)
                == .usable(pinnedInterface: "wlan0"))
    }

    @Test func interfaceOrAddressChangesAbort() {
        let wifi = Paths.satisfied(via: Paths.wifi)
        let key = PathKey(wifi)
        #expect(!PathPolicy.mustAbort(startedUnder: key, pinnedInterface: nil, allowsExpensive: true, newPath: wifi))
        #expect(PathPolicy.mustAbort(startedUnder: key, pinnedInterface: nil, allowsExpensive: true, newPath: Paths.offline))
        #expect(PathPolicy.mustAbort(startedUnder: key, pinnedInterface: nil, allowsExpensive: true,
                                     newPath: Paths.satisfied(via: Paths.ethernet)))
        #expect(PathPolicy.mustAbort(startedUnder: key, pinnedInterface: nil, allowsExpensive: true,
                                     newPath: Paths.satisfied(via: Paths.wifi, source: "192.168.1.99")))
        // wifi -> cellular for a download that refuses expensive paths
        #expect(PathPolicy.mustAbort(startedUnder: key, pinnedInterface: nil, allowsExpensive: false,
                                     newPath: Paths.satisfied(via: Paths.cellular)))
    }

    @Test func pinnedTransfersSurviveUntilTheirInterfaceGoes() {
        let key = PathKey(Paths.satisfied(via: Paths.cellular, also: [Paths.wifi]))
        #expect(!PathPolicy.mustAbort(startedUnder: key, pinnedInterface: "wlan0", allowsExpensive: false,
                                      newPath: Paths.satisfied(via: Paths.cellular, source: "10.64.0.9", also: [Paths.wifi])))
        #expect(PathPolicy.mustAbort(startedUnder: key, pinnedInterface: "wlan0", allowsExpensive: false,
                                     newPath: Paths.satisfied(via: Paths.cellular)))
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
        #expect(PathPolicy.usability(of: checked(.portal), hasPathSource: true, allowsExpensive: true) == .unusable)
        #expect(PathPolicy.usability(of: checked(.full), hasPathSource: true, allowsExpensive: true) == .usable(pinnedInterface: nil))
        // limited may be the probe server alone: downloads go on (and retry as they would).
        #expect(PathPolicy.usability(of: checked(.limited), hasPathSource: true, allowsExpensive: true) == .usable(pinnedInterface: nil))
        // The first answer is pending: wait quietly (milliseconds), do not fetch a login page.
        #expect(PathPolicy.usability(of: checked(.unknown), hasPathSource: true, allowsExpensive: true) == .unknown)
        // No check configured: as before.
        #expect(PathPolicy.usability(of: Paths.satisfied(via: Paths.ethernet), hasPathSource: true, allowsExpensive: true)
                == .usable(pinnedInterface: nil))
        // A transfer running when the portal appears is stopped (the same route, a new answer).
        #expect(PathPolicy.mustAbort(startedUnder: PathKey(checked(.full)), pinnedInterface: nil, allowsExpensive: true,
                                     newPath: checked(.portal)))
    }
}
