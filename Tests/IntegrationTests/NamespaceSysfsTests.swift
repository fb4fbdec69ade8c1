import Glibc
import Testing
@testable import LinuxReachability
import TestSupport

@Suite("sysfs facts inside another namespace", .needsRoot)
struct NamespaceSysfsTests {
    @Test("the private sysfs mount shows the namespace's interfaces, not the host's")
    func privateSysfs() throws {
        let lab = NetworkLab()
        defer { lab.close() }
        let namespace = try lab.namespace("s")
        try ip("-n \(namespace) link add brtest0 type bridge")
        let reader = try NetworkNamespace.run(in: namespace) {
            SysfsReader(rootDescriptor: try NetworkNamespace.openPrivateSysfs())
        }
        let link = LinkInfo(index: 0, name: "brtest0", flags: 0, hardwareType: 1, kind: "bridge")
        #expect(reader.facts(for: link).deviceType == "bridge")
        // The host's /sys has no such interface.
        #expect(SysfsReader.host()?.facts(for: link).deviceType == nil)
    }

    @Test("a missing namespace is a clear error")
    func missingNamespace() {
        #expect(throws: ReachabilityError.namespaceNotFound) {
            try PathMonitor(configuration: .init(networkNamespace: "rch-does-not-exist")).start()
        }
    }
}
