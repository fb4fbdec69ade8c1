// ReachabilityBanner: the Reachability.swift iOS sample's `updateUI(from:)` as one terminal line.
//
// The iOS sample sets a label's text and colour from `reachability.connection` inside
// `whenReachable` / `whenUnreachable`, with the closures on the main queue. Here the "label" is
// one terminal line redrawn in place, and the main queue is served by `dispatchMain()`.

import Dispatch
import Foundation
import LinuxReachability

let arguments = Array(CommandLine.arguments.dropFirst())
if arguments.contains("--help") || arguments.contains("-h") {
    print("""
    OVERVIEW: Show the network connection (wired, wifi, cellular, offline) on one line that updates in place.

    USAGE: ReachabilityBanner [--once] [--no-cellular]

    OPTIONS:
      --once          Print the current connection and exit (0 when reachable, 1 when offline).
      --no-cellular   Report cellular as offline (Reachability.swift's allowsCellularConnection = false).
      -h, --help      Show help information.

    Stop it with Ctrl-C. NO_COLOR turns colours off; without a terminal every change is its own line.
    """)
    exit(0)
}
if let unknown = arguments.first(where: { $0 != "--once" && $0 != "--no-cellular" }) {
    FileHandle.standardError.write(Data("Error: Unknown option '\(unknown)'\nUSAGE: ReachabilityBanner [--once] [--no-cellular]\nSee 'ReachabilityBanner --help'.\n".utf8))
    exit(64)
}
let once = arguments.contains("--once")
let isTerminal = isatty(STDOUT_FILENO) == 1
let usesColour = isTerminal && ProcessInfo.processInfo.environment["NO_COLOR"] == nil

/// The iOS sample's `updateUI(from:)`: label text and colour from the connection.
@Sendable func updateUI(from reachability: Reachability) {
    let (text, colour): (String, String)
    let interface = reachability.currentPath.primaryInterface.map { " (\($0.name))" } ?? ""
    switch reachability.connection {
    case .wired: (text, colour) = ("● wired\(interface)", "32")         // green
    case .wifi: (text, colour) = ("● wifi\(interface)", "32")
    case .cellular: (text, colour) = ("● cellular\(interface)", "33")   // yellow: expensive
    case .unavailable: (text, colour) = ("○ offline", "31")              // red
    }
    let label = usesColour ? "\u{1B}[\(colour)m\(text)\u{1B}[0m" : text
    // One line: on a terminal go back to its start and clear it; otherwise one line per change.
    let line = isTerminal && !once ? "\r\u{1B}[K\(label)" : label + "\n"
    FileHandle.standardOutput.write(Data(line.utf8))
    if once { exit(reachability.connection == .unavailable ? 1 : 0) }
}

let reachability = Reachability()
reachability.allowsCellularConnection = !arguments.contains("--no-cellular")
reachability.whenReachable = { updateUI(from: $0) }
reachability.whenUnreachable = { updateUI(from: $0) }

// Ctrl-C: leave the terminal on a fresh line.
let interrupt = SignalHandlers.installBlocking([SIGINT], queue: .main) { _ in
    reachability.stopNotifier()
    if isTerminal { FileHandle.standardOutput.write(Data("\n".utf8)) }
    exit(0)
}

do {
    try reachability.startNotifier()
} catch {
    FileHandle.standardError.write(Data("Error: cannot watch the network: \(error)\n".utf8))
    exit(1)
}
dispatchMain()
