import LinuxReachability
import Testing
@testable import ReachabilityCLI

@Suite("Classification rules and classify.conf")
struct ClassifyRulesTests {
    @Test(arguments: [
        ("wlan*=wifi", ClassificationOverride(pattern: "wlan*", type: .wifi, source: "s")),
        (" usb0 = Cellular ", ClassificationOverride(pattern: "usb0", type: .cellular, source: "s")),
        ("en[ox]*=wired", ClassificationOverride(pattern: "en[ox]*", type: .wired, source: "s")),
        ("tun0=other", ClassificationOverride(pattern: "tun0", type: .other, source: "s")),
        ("weird=name=wired", nil),
    ])
    func parsesRules(text: String, expected: ClassificationOverride?) throws {
        if let expected {
            #expect(try ClassifyRules.parseRule(text, source: "s") == expected)
        } else {
            #expect(throws: ClassifyRules.RuleError.self) { try ClassifyRules.parseRule(text, source: "s") }
        }
    }

    @Test func fileSkipsCommentsAndBlankLinesAndNamesEachLine() throws {
        let text = "# phones tethered over USB\n\nusb*=cellular\r\n  wl* = wifi  # the laptop's card\neth#1=wired\n"
        #expect(try ClassifyRules.parseFile(text, path: "/etc/reachability/classify.conf") == [
            ClassificationOverride(pattern: "usb*", type: .cellular, source: "/etc/reachability/classify.conf:3"),
            ClassificationOverride(pattern: "wl*", type: .wifi, source: "/etc/reachability/classify.conf:4"),
            ClassificationOverride(pattern: "eth#1", type: .wired, source: "/etc/reachability/classify.conf:5"),
        ])
    }

    @Test(arguments: [
        ("usb0=cellular\nbogus line\n", "/c.conf:2: expected PATTERN=TYPE, got 'bogus line'"),
        ("\n\n\nwlan0=radio", "/c.conf:4: unknown type 'radio' (expected one of wired, wifi, cellular, loopback, other)"),
        ("=wifi", "/c.conf:1: missing interface name pattern before '=' in '=wifi'"),
    ])
    func badFileLinesNameFileAndLine(text: String, message: String) {
        #expect(throws: ClassifyRules.RuleError.self) { try ClassifyRules.parseFile(text, path: "/c.conf") }
        do {
            _ = try ClassifyRules.parseFile(text, path: "/c.conf")
        } catch {
            #expect(error.description == message)
        }
    }

    @Test(arguments: [
        (["HOME": "/home/a"], ["/home/a/.config/reachability/classify.conf", "/etc/reachability/classify.conf"]),
        (["HOME": "/home/a", "XDG_CONFIG_HOME": "/x"], ["/x/reachability/classify.conf", "/etc/reachability/classify.conf"]),
        (["HOME": "/home/a", "XDG_CONFIG_HOME": "relative"],
         ["/home/a/.config/reachability/classify.conf", "/etc/reachability/classify.conf"]),
        ([:], ["/etc/reachability/classify.conf"]),
    ])
    func configurationFileLocations(environment: [String: String], expected: [String]) {
        #expect(ClassifyRules.configurationFiles(environment: environment) == expected)
    }

    @Test func commandLineRulesComeFirstThenUserThenSystemFile() async throws {
        let harness = Harness(
            files: ["/etc/reachability/classify.conf": "usb*=cellular\n",
                    "/home/tester/.config/reachability/classify.conf": "# mine\nwl*=wired\n"])
        #expect(await harness.run(["status", "--classify", "wlp2s0=wifi"]) == 0)
        let configuration = try #require(harness.configurations.first)
        #expect(configuration.classificationOverrides == [
            ClassificationOverride(pattern: "wlp2s0", type: .wifi, source: "--classify"),
            ClassificationOverride(pattern: "wl*", type: .wired, source: "/home/tester/.config/reachability/classify.conf:2"),
            ClassificationOverride(pattern: "usb*", type: .cellular, source: "/etc/reachability/classify.conf:1"),
        ])
    }

    @Test func badConfigLineIsAClearErrorWithExit78() async {
        let harness = Harness(files: ["/etc/reachability/classify.conf": "usb*=cellular\nwlan0 wifi\n"])
        #expect(await harness.run(["status"]) == 78)
        #expect(harness.standardOutput.text.isEmpty)
        #expect(harness.standardError.text
                == "Error: /etc/reachability/classify.conf:2: expected PATTERN=TYPE, got 'wlan0 wifi'\n")
        #expect(harness.configurations.isEmpty)
    }
}
