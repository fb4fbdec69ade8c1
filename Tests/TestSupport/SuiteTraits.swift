import Testing

// The conditions the integration suites run under, named once: each suite used to spell the
// check and its reason out, the same two lines in forty files.

extension Trait where Self == ConditionTrait {
    /// Skips without root, which network namespaces, veth links and iptables need (CI is root).
    public static var needsRoot: Self { .enabled(if: isRoot, rootReason) }

    /// Skips where nginx is not installed (scripts/setup.sh installs it).
    public static var needsNginx: Self {
        .enabled(if: DownloadTestNginx.isAvailable, "nginx is not installed at /usr/sbin/nginx")
    }
}

/// A suite of download scenarios: conforming gives it the fixtures' short names, so each suite
/// reads as its scenarios rather than as the same three type aliases.
public protocol DownloadScenarios {}

extension DownloadScenarios {
    /// The fixtures (random content, scratch directories, waits, finishing a download).
    public typealias F = DownloadFixtures
    /// The scriptable HTTP server on loopback.
    public typealias Server = DownloadTestHTTPServer
    /// One scripted reply of `Server`.
    public typealias Reply = DownloadTestHTTPServer.Reply
}
