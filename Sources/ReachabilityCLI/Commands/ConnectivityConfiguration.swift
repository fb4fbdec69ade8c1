import LinuxReachability
import ReachabilityBase

/// Where the connectivity check's definition comes from, strongest first: `--connectivity-url` /
/// `--connectivity-response`, `$XDG_CONFIG_HOME/reachability/reachability.conf`,
/// `/etc/reachability/reachability.conf`, and only when none of those names a URL,
/// NetworkManager's `[connectivity]` section, so a machine that already checks keeps one
/// definition. Nothing configured: no check, nothing sent.
struct ConnectivitySettings: Sendable, Equatable {
    /// nil: not set here; "": explicitly off (stops the fallback to NetworkManager).
    var url: String?
    var response: String?
    var interval: Duration?
    var timeout: Duration?
    /// Where `url` came from, for messages (`--connectivity-url`, a file path).
    var source: String?

    /// Fills what `self` leaves unset from `weaker`.
    func merged(over weaker: ConnectivitySettings) -> ConnectivitySettings {
        ConnectivitySettings(url: url ?? weaker.url, response: response ?? weaker.response,
                             interval: interval ?? weaker.interval, timeout: timeout ?? weaker.timeout,
                             source: url != nil ? source : weaker.source)
    }
}

enum ConnectivityConfiguration {
    /// A bad line in reachability.conf or a bad value anywhere: exit 78.
    struct ConfigurationError: Error, Equatable, CustomStringConvertible {
        var description: String
    }

    /// Environment variable naming a directory to read instead of /etc/NetworkManager (its
    /// NetworkManager.conf and conf.d/); the packaged /usr/lib and /run conf.d are then skipped.
    static let networkManagerDirectoryVariable = "REACHABILITY_NETWORKMANAGER_DIR"

    /// NetworkManager's default `response` when `[connectivity]` sets none.
    static let networkManagerDefaultResponse = "NetworkManager is online"

    /// The reachability.conf files, user first.
    static func reachabilityFiles(environment: [String: String]) -> [String] {
        ConfigurationFiles.named("reachability.conf", environment: environment)
    }

    /// `key=value` lines; `#` starts a comment; `connectivity-url`, `connectivity-response`,
    /// `connectivity-interval` and `connectivity-timeout` (seconds). Other keys are errors, so a
    /// typo is not silently a check that never runs.
    static func parseReachabilityConf(_ text: String, path: String) throws(ConfigurationError) -> ConnectivitySettings {
        var settings = ConnectivitySettings()
        for (number, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.hasSuffix("\r") ? raw.dropLast() : raw
            let content = trimmed(line)
            if content.isEmpty || content.hasPrefix("#") { continue }
            let place = "\(path):\(number + 1)"
            guard let equals = content.firstIndex(of: "=") else {
                throw ConfigurationError(description: "\(place): expected key=value, got '\(content)'")
            }
            let key = trimmed(content[..<equals])
            let value = trimmed(content[content.index(after: equals)...])
            switch key {
            case "connectivity-url":
                settings.url = value
                settings.source = place
            case "connectivity-response":
                settings.response = value
            case "connectivity-interval":
                settings.interval = try wholeSeconds(value, place: place, key: key)
            case "connectivity-timeout":
                settings.timeout = try seconds(value, place: place, key: key)
            default:
                throw ConfigurationError(description: "\(place): unknown key '\(key)' (expected connectivity-url, connectivity-response, connectivity-interval or connectivity-timeout)")
            }
        }
        return settings
    }

    /// The NetworkManager files, in the order NetworkManager reads them: NetworkManager.conf, then
    /// conf.d snippets by file name, a name in /etc hiding the same name in /run and /usr/lib.
    static func networkManagerFiles(environment: [String: String], listDirectory: (String) -> [String]) -> [String] {
        let directories: [String]
        let main: String
        if let override = environment[networkManagerDirectoryVariable], override.hasPrefix("/") {
            main = override + "/NetworkManager.conf"
            directories = [override + "/conf.d"]
        } else {
            main = "/etc/NetworkManager/NetworkManager.conf"
            directories = ["/usr/lib/NetworkManager/conf.d", "/run/NetworkManager/conf.d", "/etc/NetworkManager/conf.d"]
        }
        var snippets: [String: String] = [:]
        for directory in directories {
            for name in listDirectory(directory) where name.hasSuffix(".conf") && !name.hasPrefix(".") {
                snippets[name] = directory + "/" + name
            }
        }
        return [main] + snippets.keys.sorted().compactMap { snippets[$0] }
    }

    /// The merged `[connectivity]` section of NetworkManager keyfiles (later files win), or nil
    /// when it names no URI or is disabled (`enabled=false`, `interval=0`).
    static func parseNetworkManager(_ files: [(path: String, text: String)]) -> ConnectivitySettings? {
        var values: [String: (String, String)] = [:]
        for (path, text) in files {
            var section = ""
            for raw in text.split(separator: "\n") {
                let line = trimmed(raw)
                if line.isEmpty || line.hasPrefix("#") || line.hasPrefix(";") { continue }
                if line.hasPrefix("[") && line.hasSuffix("]") {
                    section = trimmed(line.dropFirst().dropLast())
                    continue
                }
                guard section == "connectivity", let equals = line.firstIndex(of: "=") else { continue }
                let key = trimmed(line[..<equals])
                values[key] = (trimmed(line[line.index(after: equals)...]), path)
            }
        }
        guard let (uri, path) = values["uri"], !uri.isEmpty else { return nil }
        if let enabled = values["enabled"]?.0.lowercased(), ["false", "no", "0"].contains(enabled) { return nil }
        var settings = ConnectivitySettings(url: uri, source: "\(path) [connectivity]")
        settings.response = values["response"]?.0 ?? networkManagerDefaultResponse
        if let interval = values["interval"]?.0 {
            // As NetworkManager reads it (nm-config-data.c, nm-connectivity.c): whole seconds,
            // anything else is its default, 0 turns the check off, at most a week.
            let seconds = networkManagerInterval.value(from: interval) ?? networkManagerDefaultInterval
            if seconds == 0 { return nil }
            settings.interval = .seconds(min(seconds, maximumIntervalSeconds))
        }
        return settings
    }

    /// Builds the check from the merged settings; nil when none is configured or it is off.
    static func check(from settings: ConnectivitySettings) throws(ConfigurationError) -> ConnectivityCheck? {
        guard let url = settings.url, !url.isEmpty, url != "none", url != "off" else { return nil }
        do {
            return try ConnectivityCheck(url: url, expectedResponse: settings.response,
                                         interval: settings.interval ?? .seconds(300), timeout: settings.timeout ?? .seconds(5))
        } catch {
            throw ConfigurationError(description: "\(settings.source ?? "connectivity check"): \(error.description)")
        }
    }

    /// NetworkManager's interval when `[connectivity]` sets none or an unreadable one.
    static let networkManagerDefaultInterval = 300
    /// NetworkManager's longest interval: a week.
    static let maximumIntervalSeconds = 7 * 24 * 3600

    /// NetworkManager's `interval=` as its keyfile reader takes it: an unsigned 32-bit number of
    /// seconds (anything else is its default).
    static let networkManagerInterval = Count(0...Int(UInt32.max), of: "whole seconds")

    /// `connectivity-interval=`: whole seconds from 1 to a week, as NetworkManager takes it. A
    /// fraction is refused rather than rounded: `0.001` would be about 550 checks a second
    /// against someone's server.
    static let intervalValue = Count(1...maximumIntervalSeconds, of: "whole seconds")

    /// `connectivity-timeout=`: any span above 0, at most a year.
    static let timeoutValue = Seconds.positive(upTo: .seconds(86_400 * 365))

    static func wholeSeconds(_ text: String, place: String, key: String) throws(ConfigurationError) -> Duration {
        do {
            return .seconds(try intervalValue.parse(text))
        } catch {
            let hint = text == "0" ? "; to turn the check off, set connectivity-url=none" : ""
            throw ConfigurationError(description: "\(place): \(error.message(for: key)) (a week, NetworkManager's longest)\(hint)")
        }
    }

    static func seconds(_ text: String, place: String, key: String) throws(ConfigurationError) -> Duration {
        do {
            return try timeoutValue.parse(text)
        } catch {
            throw ConfigurationError(description: "\(place): \(error.message(for: key))")
        }
    }
}

/// Without leading and trailing spaces and tabs.
private func trimmed(_ text: some StringProtocol) -> String {
    var text = Substring(text)
    while text.first == " " || text.first == "\t" { text = text.dropFirst() }
    while text.last == " " || text.last == "\t" { text = text.dropLast() }
    return String(text)
}
