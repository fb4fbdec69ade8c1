import LinuxReachability
import ReachabilityBase
import ResumableDownloads
import ReachabilityEvents

/// The settings SIGHUP can change, from the command line and `agent.conf`.
package struct AgentSettings: Sendable, Equatable {
    /// Downloads transferring at once.
    package var maximumConcurrentDownloads: Int
    /// Whether new downloads may use expensive (cellular-like or metered) paths.
    package var allowsExpensive: Bool
    /// Whether new downloads may use a roaming modem.
    package var allowsRoaming: Bool
    /// Connections open at once to one server, over every download (`--connections`).
    package var maximumConnectionsPerHost = DownloadAgent.defaultConnectionsPerHost
    /// Directories (absolute, normalised) where `queue add -o` may put files, besides
    /// `STATE_DIR/files`: the owner lists them in `agent.conf` as `download-dir=`.
    package var downloadDirectories: [String] = []
    /// What downloads leave free on their file systems (`min-free-space=`): one that would
    /// leave less waits for space (`SpacePolicy`).
    package var minimumFreeSpace = MinimumFreeSpace.standard
    /// One bandwidth limit for the whole agent, by time of day (`limit-rate=` lines).
    package var rateLimit = AgentRateLimitPolicy()
    /// The proxy for every download (`--proxy`, `proxy=`): a checked `ProxyURL`'s text, "" for
    /// none (`--no-proxy`, `proxy=none`), nil for the agent's environment (`http_proxy`, ...).
    /// A job's own proxy (`queue add --proxy`) wins over it.
    package var proxy: String?

    package init(maximumConcurrentDownloads: Int, allowsExpensive: Bool, allowsRoaming: Bool = true,
                 downloadDirectories: [String] = []) {
        self.maximumConcurrentDownloads = maximumConcurrentDownloads
        self.allowsExpensive = allowsExpensive
        self.allowsRoaming = allowsRoaming
        self.downloadDirectories = downloadDirectories
    }

    /// `--max-concurrent` and `max-concurrent=`.
    package static let concurrency = Count(1...64)

    /// `agent.conf`: `key=value` lines, `#` comments. Keys: `max-concurrent` (1...64), `connections` (1...16),
    /// `no-expensive` and `no-roaming` (true/false), `min-free-space` (`2g`, `10%`), `download-dir` (an absolute directory; repeatable),
    /// `limit-rate` (`RATE [HH:MM-HH:MM [DAYS]]`, repeatable: `AgentRateLimitPolicy`), `proxy` (a
    /// proxy URL, or `none` for direct connections: `ProxyURL`). Values
    /// present in the file override `base`.
    package static func parse(_ text: String, base: AgentSettings, path: String) throws(AgentFailure) -> AgentSettings {
        var file = ConfigurationFile(settings: base)
        for (number, rawLine) in text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline).enumerated() {
            var line = Substring(rawLine)
            if let hash = line.firstIndex(of: "#") { line = line[..<hash] }
            let trimmed = line.trimmingWhitespace()
            if trimmed.isEmpty { continue }
            let parts = trimmed.split(separator: "=", maxSplits: 1).map { $0.trimmingWhitespace() }
            let location = "\(path):\(number + 1)"
            guard parts.count == 2 else { throw AgentFailure("\(location): expected key=value", kind: .configuration) }
            try file.apply(parts[0], parts[1], location: location)
        }
        var settings = file.settings
        if !file.directories.isEmpty { settings.downloadDirectories = file.directories }
        if let rateLimit = file.rateLimit { settings.rateLimit = rateLimit }
        return settings
    }
}

/// `agent.conf` as it is read: the settings so far, and the keys that may repeat (`download-dir`,
/// `limit-rate`), collected until the whole file is read.
private struct ConfigurationFile {
    var settings: AgentSettings
    var directories: [String] = []
    var rateLimit: AgentRateLimitPolicy?

    /// Applies one `key=value` line found at `location`.
    mutating func apply(_ key: String, _ text: String, location: String) throws(AgentFailure) {
        guard let row = AgentSettings.fileKeys.first(where: { $0.name == key }) else {
            let names = AgentSettings.fileKeys.map(\.name).joined(separator: ", ")
            throw AgentFailure("\(location): unknown key '\(key)' (expected \(names))", kind: .configuration)
        }
        try row.apply(&self, text, location)
    }
}

/// A value of `key` read by `kind`, or the line's error.
private func value<Kind: TextValueKind>(_ kind: Kind, _ text: String, key: String, location: String) throws(AgentFailure) -> Kind.Value {
    do {
        return try kind.parse(text)
    } catch {
        throw AgentFailure("\(location): \(error.message(for: key))", kind: .configuration)
    }
}

extension AgentSettings {
    /// One key of `agent.conf`.
    package struct FileKey: Sendable {
        /// The key, as the command-line option of the same setting is named.
        package let name: String
        /// How its value is written (`N`, `true|false`), for help.
        package let form: String
        fileprivate let apply: @Sendable (inout ConfigurationFile, _ text: String, _ location: String) throws(AgentFailure) -> Void
    }

    /// The keys of `agent.conf`, one row each: the parser, its error for an unknown key and
    /// `reachability help agent` all read this table, so they cannot drift.
    package static let fileKeys: [FileKey] = [
        FileKey(name: "max-concurrent", form: "N") { (file, text, location) throws(AgentFailure) in
            file.settings.maximumConcurrentDownloads = try value(AgentSettings.concurrency, text, key: "max-concurrent", location: location)
        },
        FileKey(name: "connections", form: "N") { (file, text, location) throws(AgentFailure) in
            file.settings.maximumConnectionsPerHost = try value(DownloadAgent.connectionsPerHostValue, text, key: "connections", location: location)
        },
        FileKey(name: "no-expensive", form: "true|false") { (file, text, location) throws(AgentFailure) in
            file.settings.allowsExpensive = !(try value(YesOrNo(), text, key: "no-expensive", location: location))
        },
        FileKey(name: "no-roaming", form: "true|false") { (file, text, location) throws(AgentFailure) in
            file.settings.allowsRoaming = !(try value(YesOrNo(), text, key: "no-roaming", location: location))
        },
        FileKey(name: "min-free-space", form: "SIZE|PERCENT%") { (file, text, location) throws(AgentFailure) in
            file.settings.minimumFreeSpace = try value(MinimumFreeSpace.Text(), text, key: "min-free-space", location: location)
        },
        FileKey(name: "download-dir", form: "/abs/dir") { (file, text, location) throws(AgentFailure) in
            guard let directory = AgentDestination.normalizedAbsolutePath(text) else {
                throw AgentFailure("\(location): download-dir must be an absolute path without . or .. components",
                                   kind: .configuration)
            }
            file.directories.append(directory)
        },
        FileKey(name: "limit-rate", form: "RATE [HH:MM-HH:MM [DAYS]]") { (file, text, location) throws(AgentFailure) in
            do throws(InvalidValue) {
                var policy = file.rateLimit ?? AgentRateLimitPolicy()
                try policy.add(text)
                file.rateLimit = policy
            } catch {
                throw AgentFailure("\(location): \(error.message(for: "limit-rate"))", kind: .configuration)
            }
        },
        FileKey(name: "proxy", form: "URL|none") { (file, text, location) throws(AgentFailure) in
            guard text.lowercased() != "none" else {
                file.settings.proxy = ""
                return
            }
            do throws(ProxyURLError) {
                file.settings.proxy = try ProxyURL(text).text
            } catch {
                throw AgentFailure("\(location): proxy \(error.description) (or 'none' for direct connections)", kind: .configuration)
            }
        },
    ]
}
