// HalfTunesURLSession: the download logic of the iOS "HalfTunes" URLSession sample, ported to a
// terminal with as few changes as possible: ResumableURLSession for URLSession, Reachability for
// Reachability.swift, a terminal table for the UITableView. A dropped connection's resume data
// is used at once, or written to disk while offline and picked up when the network is back or
// on the next launch.

import Dispatch
import Foundation
import LinuxReachability
import Synchronization

let usage = "USAGE: HalfTunesURLSession (<url> ... | --search <term> [--search-url <url>]) [-d <dir>] [--state-dir <dir>] [--background [--agent <path>] [--connections <n>]]"

func fail(_ message: String, _ status: Int32) -> Never {
    restoreTerminal()
    FileHandle.standardError.write(Data("Error: \(message)\n".utf8))
    if status == 64 { FileHandle.standardError.write(Data("\(usage)\nSee 'HalfTunesURLSession --help'.\n".utf8)) }
    exit(status)
}

// MARK: arguments

var urls: [URL] = []
var directory = FileManager.default.currentDirectoryPath
var stateDirectory: String?
var background: BackgroundOptions?
var agent: String?
var connections: Int?
var searchTerm: String?
var searchURL = URL(string: "https://itunes.apple.com/search")!
let arguments = Array(CommandLine.arguments.dropFirst())
if arguments.contains("--help") || arguments.contains("-h") {
    print("""
    OVERVIEW: Download URLs the way the iOS HalfTunes sample does, on ResumableURLSession: pause,
    resume and cancel from the keyboard; a dropped network keeps its resume data for later.

    \(usage)

    ARGUMENTS:
      <url>               http or https URLs.

    OPTIONS:
      --search <term>     Search for songs first, as the seed does (a data task), and download
                          their previews.
      --search-url <url>  The search endpoint (default https://itunes.apple.com/search; it gets
                          media=music&entity=song&term=<term> and answers iTunes' JSON).
      -d <dir>            Directory for the files and their saved resume data (default: current directory).
      --state-dir <dir>   The session's state directory (default: <dir>/.halftunes-urlsession; with
                          --background, the agent's: its own default unless given).
      --background        Use the seed's background session (com.raywenderlich.HalfTunes.bgSession):
                          downloads belong to your download agent and go on after you quit; the next
                          launch gets the tracks that finished and continues the rest.
      --agent <path>      The reachability binary to start when no agent runs (default: reachability on PATH,
                          or beside this program).
      --connections <n>   With --background: at most this many connections to one server
                          (httpMaximumConnectionsPerHost, 1-16; default 6).
      -h, --help          Show help information.

    KEYS (when stdin is a terminal):
      up/down, 1-9        Select a track.
      p / r / c           Pause / resume / cancel the selected track.
      q                   Quit; running downloads keep their resume data (NAME.resumedata) for the next launch
                        (with --background they go on in the agent).

    When the connection drops, the resume data is used at once if the network is still there,
    else written to <dir>/NAME.resumedata and used when the network is back, or on the next launch.
    Without a terminal on stdin, prints one line per event and exits when every track is done.
    Exit status: 0 when every track is downloaded (or cancelled), 1 when one failed, 130 after Ctrl-C.
    """)
    exit(0)
}
var index = 0
while index < arguments.count {
    let argument = arguments[index]
    switch argument {
    case "-d", "--state-dir", "--agent", "--connections", "--search", "--search-url":
        index += 1
        guard index < arguments.count else { fail("Missing value for '\(argument)'", 64) }
        switch argument {
        case "-d": directory = arguments[index]
        case "--agent": agent = arguments[index]
        case "--search": searchTerm = arguments[index]
        case "--search-url":
            guard let url = URL(string: arguments[index]), ["http", "https"].contains(url.scheme?.lowercased() ?? ""), url.host != nil else {
                fail("The value '\(arguments[index])' is invalid for '--search-url': expected an http or https URL", 64)
            }
            searchURL = url
        case "--connections":
            guard let count = Int(arguments[index]), (1...16).contains(count) else {
                fail("The value '\(arguments[index])' is invalid for '--connections': expected a number from 1 to 16", 64)
            }
            connections = count
        default: stateDirectory = arguments[index]
        }
    case "--background":
        background = BackgroundOptions()
    default:
        guard !argument.hasPrefix("-") else { fail("Unknown option '\(argument)'", 64) }
        guard let url = URL(string: argument), ["http", "https"].contains(url.scheme?.lowercased() ?? ""), url.host != nil else {
            fail("The value '\(argument)' is invalid for '<url>': expected an http or https URL", 64)
        }
        urls.append(url)
    }
    index += 1
}
guard !urls.isEmpty || searchTerm != nil else { fail("Missing expected argument '<url> ...' (or --search <term>)", 64) }
if agent != nil, background == nil { fail("--agent goes with --background", 64) }
if connections != nil, background == nil { fail("--connections goes with --background", 64) }
if background != nil {
    // The agent binary: as given, else `reachability` beside this program (a build directory),
    // else the one on PATH.
    let sibling = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("reachability")
    background?.agent = agent.map { URL(fileURLWithPath: $0) }
        ?? (FileManager.default.isExecutableFile(atPath: sibling.path) && CommandLine.arguments[0].contains("/") ? sibling : nil)
    background?.stateDirectory = stateDirectory.map { URL(fileURLWithPath: $0, isDirectory: true) }
    background?.connections = connections
}

// MARK: terminal

/// The settings to put back when raw mode is on (a global: atexit takes a plain C function).
let savedTerminal = Mutex<termios?>(nil)

func enterRawMode() {
    var settings = termios()
    guard tcgetattr(STDIN_FILENO, &settings) == 0 else { return }
    savedTerminal.withLock { $0 = settings }
    settings.c_lflag &= ~tcflag_t(ICANON | ECHO)   // keys one by one, not echoed; Ctrl-C still a signal
    tcsetattr(STDIN_FILENO, TCSANOW, &settings)
    FileHandle.standardOutput.write(Data("\u{1B}[?25l".utf8))
    atexit { restoreTerminal() }
}

func restoreTerminal() {
    guard var settings = savedTerminal.withLock({ saved -> termios? in defer { saved = nil }; return saved }) else { return }
    tcsetattr(STDIN_FILENO, TCSANOW, &settings)
    FileHandle.standardOutput.write(Data("\u{1B}[?25h".utf8))
}

// MARK: main

let isInteractive = isatty(STDIN_FILENO) == 1 && isatty(STDOUT_FILENO) == 1
let documents = URL(fileURLWithPath: directory, isDirectory: true).standardizedFileURL
do {
    try FileManager.default.createDirectory(at: documents, withIntermediateDirectories: true)
} catch {
    fail("cannot create \(documents.path): \(error.localizedDescription)", 1)
}
let stateRoot = stateDirectory.map { URL(fileURLWithPath: $0, isDirectory: true) }
    ?? documents.appendingPathComponent(".halftunes-urlsession", isDirectory: true)

// The seed's search bar: the results become the track list (after any URLs given).
var names = urls.map(\.lastPathComponent)
if let searchTerm {
    // The search's session keeps nothing, but every session has a state directory: its own,
    // beside the documents (with --background, --state-dir is the agent's, not ours to fill).
    let queryService = QueryService(searchURL: searchURL,
                                    stateDirectory: documents.appendingPathComponent(".halftunes-urlsession/search", isDirectory: true))
    let answer = Mutex<([SearchResult], String)?>(nil)
    let answered = DispatchSemaphore(value: 0)
    queryService.getSearchResults(searchTerm: searchTerm) { results, errorMessage in
        answer.withLock { $0 = (results, errorMessage) }
        answered.signal()
    }
    answered.wait()
    let (results, errorMessage) = answer.withLock { $0 } ?? ([], "no answer")
    print("search: \(results.count) results for \(searchTerm)")
    for result in results { print("found: \(result.artist) - \(result.name)") }
    if results.isEmpty && urls.isEmpty {
        fail(errorMessage.isEmpty ? "the search found no songs" : "search failed: \(errorMessage)", 1)
    }
    urls += results.map(\.previewURL)
    names += results.map(\.name)
}

let controller = SearchViewController(
    urls: urls, names: names, documentsPath: documents,
    stateDirectory: stateRoot,
    background: background,
    tableView: TerminalTableView(isInteractive: isInteractive))

extension SearchViewController {
    /// Quits keeping resume data for the next launch.
    func quit(interrupted: Bool) async -> Never {
        await saveForNextLaunch()
        if tableView.isInteractive { tableView.redraw() }
        restoreTerminal()
        exit(interrupted ? 130 : 0)
    }

    /// Leaves once every track is done: 1 when one failed (cancelled ones count as done).
    func exitWhenFinished() {
        guard isFinished else { return }
        if tableView.isInteractive { tableView.redraw() }
        restoreTerminal()
        exit(tracks.contains { failed.contains($0.previewURL) && status[$0.previewURL] != "cancelled" } ? 1 : 0)
    }
}

// Ctrl-C and SIGTERM: keep resume data for the next launch (installed before anything starts).
let signals = SignalHandlers.installBlocking([SIGINT, SIGTERM], queue: .main) { _ in
    Task { @MainActor in await controller.quit(interrupted: true) }
}

controller.viewDidLoad()

if isInteractive {
    enterRawMode()
    // Keys on a plain thread (read(2) blocks), handled on the main queue like taps.
    Thread {
        var escape: [UInt8] = []
        while true {
            var byte: UInt8 = 0
            guard read(STDIN_FILENO, &byte, 1) == 1 else { return }
            if !escape.isEmpty || byte == 0x1B {
                escape.append(byte)
                guard escape.count == 3 else { continue }
                let delta = escape[2] == UInt8(ascii: "A") ? -1 : escape[2] == UInt8(ascii: "B") ? 1 : 0
                escape = []
                DispatchQueue.main.async {
                    MainActor.assumeIsolated {
                        let table = controller.tableView
                        table.selectedRow = max(0, min(controller.tracks.count - 1, table.selectedRow + delta))
                    }
                }
                continue
            }
            let key = byte
            DispatchQueue.main.async {
                MainActor.assumeIsolated {
                    let table = controller.tableView
                    if let digit = Character(Unicode.Scalar(key)).wholeNumberValue, (1...min(9, controller.tracks.count)).contains(digit) {
                        table.selectedRow = digit - 1
                        return
                    }
                    let track = controller.tracks[table.selectedRow]
                    switch key {
                    case UInt8(ascii: "p"): controller.pauseTapped(track)
                    case UInt8(ascii: "r"): controller.resumeTapped(track)
                    case UInt8(ascii: "c"): controller.cancelTapped(track)
                    case UInt8(ascii: "q"): Task { await controller.quit(interrupted: false) }
                    default: break
                    }
                }
            }
        }
    }.start()
}

// Like a run loop's tick: leave once every track is done.
let ticker = DispatchSource.makeTimerSource(queue: .main)
ticker.schedule(deadline: .now() + .milliseconds(100), repeating: .milliseconds(100))
ticker.setEventHandler { MainActor.assumeIsolated { controller.exitWhenFinished() } }
ticker.resume()
dispatchMain()
