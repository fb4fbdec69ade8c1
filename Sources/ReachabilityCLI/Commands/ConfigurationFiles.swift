/// Where the command line looks for its configuration files (classify.conf, reachability.conf).
enum ConfigurationFiles {
    /// The files called `name` in precedence order: the user's, then the system's.
    /// `XDG_CONFIG_HOME` is used only when absolute, as the XDG Base Directory spec requires.
    static func named(_ name: String, environment: [String: String]) -> [String] {
        var files: [String] = []
        if let xdg = environment["XDG_CONFIG_HOME"], xdg.hasPrefix("/") {
            files.append(xdg + "/reachability/" + name)
        } else if let home = environment["HOME"], !home.isEmpty {
            files.append(home + "/.config/reachability/" + name)
        }
        files.append("/etc/reachability/" + name)
        return files
    }
}
