import Foundation
import LinuxReachability
import ResumableDownloads
import Synchronization
import Testing
@testable import ReachabilityAgent
import TestSupport
@testable import ReachabilityEvents

/// `agent.conf` over the command line's settings.
@Suite("agent.conf")
struct AgentSettingsTests {
    @Test func parsesAgentConf() throws {
        let base = AgentSettings(maximumConcurrentDownloads: 4, allowsExpensive: true)
        let parsed = try AgentSettings.parse("# comment\nmax-concurrent = 2\r\nno-expensive=yes # trailing\n\n", base: base, path: "a")
        #expect(parsed == AgentSettings(maximumConcurrentDownloads: 2, allowsExpensive: false))
        #expect(try AgentSettings.parse("", base: base, path: "a") == base)
        #expect(throws: AgentFailure.self) { try AgentSettings.parse("max-concurrent=0", base: base, path: "a") }
        #expect(throws: AgentFailure.self) { try AgentSettings.parse("speed=3", base: base, path: "a") }
        #expect(throws: AgentFailure.self) { try AgentSettings.parse("no-expensive", base: base, path: "a") }
        #expect(try AgentSettings.parse("no-roaming=true", base: base, path: "a").allowsRoaming == false)
        #expect(try AgentSettings.parse("no-roaming = no", base: AgentSettings(maximumConcurrentDownloads: 4, allowsExpensive: true,
                                                                                 allowsRoaming: false), path: "a").allowsRoaming)
        #expect(throws: AgentFailure.self) { try AgentSettings.parse("no-roaming=maybe", base: base, path: "a") }
    }

    @Test func minFreeSpaceIsReadOnceWithItsBoundsAndTheLineOfABadValue() throws {
        let base = AgentSettings(maximumConcurrentDownloads: 4, allowsExpensive: true)
        #expect(base.minimumFreeSpace == .standard)
        #expect(try AgentSettings.parse("min-free-space = 2g", base: base, path: "a").minimumFreeSpace
                == MinimumFreeSpace(bytes: 2 << 30))
        #expect(try AgentSettings.parse("min-free-space=10%", base: base, path: "a").minimumFreeSpace
                == MinimumFreeSpace(bytes: 0, percent: 10))
        do {
            _ = try AgentSettings.parse("max-concurrent=2\nmin-free-space=60%\n", base: base, path: "/s/agent.conf")
            Issue.record("60% accepted")
        } catch {
            #expect(error.kind == .configuration)
            #expect(error.message.hasPrefix("/s/agent.conf:2: min-free-space: expected "), "\(error.message)")
        }
    }

    /// `proxy=`: a checked URL or `none`; a bad one names its line and never shows the password.
    @Test func proxyIsCheckedOnceAndItsPasswordNeverShown() throws {
        var base = AgentSettings(maximumConcurrentDownloads: 4, allowsExpensive: true)
        base.proxy = "http://cli:3128"
        #expect(try AgentSettings.parse("", base: base, path: "a").proxy == "http://cli:3128")
        #expect(try AgentSettings.parse("proxy = http://u:p@cache.site:3128", base: base, path: "a").proxy
                == "http://u:p@cache.site:3128")
        #expect(try AgentSettings.parse("proxy=none", base: base, path: "a").proxy == "")
        #expect(try AgentSettings.parse("proxy=socks5h://10.0.0.1:1080", base: base, path: "a").proxy == "socks5h://10.0.0.1:1080")
        for bad in ["proxy=ftp://u:secret@x", "proxy=http://u:secret@x:70000", "proxy=u:secret@x", "proxy=http://u:secret@"] {
            do {
                _ = try AgentSettings.parse("# c\n" + bad, base: base, path: "/s/agent.conf")
                Issue.record("\(bad) accepted")
            } catch {
                #expect(error.kind == .configuration)
                #expect(error.message.hasPrefix("/s/agent.conf:2: proxy "), "\(error.message)")
                #expect(!error.message.contains("secret"), "\(error.message)")
            }
        }
    }
}
