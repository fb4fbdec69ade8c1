// HalfTunes: a terminal downloader in the spirit of the URLSession "HalfTunes" tutorial app.
//
// One line per URL with progress. On a terminal, keys act on the selected item:
// up/down or 1-9 select, p pauses, r resumes, c cancels, q quits (resume data kept).
// The terminal is put in raw mode (termios) and restored on every exit path. Without a
// terminal on stdin it runs non-interactively and prints one line per event.
// Network drops are handled by the download agent itself: transfers wait for a usable path
// (PathMonitor) and resume from their checkpoint.

import Dispatch
import Foundation
import LinuxReachability
import ResumableDownloads
import Synchronization

let usage = "USAGE: HalfTunes <url> ... [-d <dir>] [--state-dir <dir>]"

func fail(_ message: String, _ status: Int32) -> Never {
    restoreTerminal()
    FileHandle.standardError.write(Data("Error: \(message)\n".utf8))
    if status == 64 { FileHandle.standardError.write(Data("\(usage)\nSee 'HalfTunes --help'.\n".utf8)) }
    exit(status)
}

// MARK: terminal

/// The terminal settings to put back; set while raw mode is on. A global because atexit(3)
/// takes a C function that cannot capture context.
let savedTerminal = Mutex<termios?>(nil)

func enterRawMode() {
    var original = termios()
    guard tcgetattr(STDIN_FILENO, &original) == 0 else { return }
    var raw = original
    // Keys arrive one by one and are not echoed; output processing and signals (Ctrl-C) stay on.
    raw.c_lflag &= ~tcflag_t(ICANON | ECHO)
    withUnsafeMutableBytes(of: &raw.c_cc) { cc in
        cc[Int(VMIN)] = 1
        cc[Int(VTIME)] = 0
    }
    savedTerminal.withLock { $0 = original }
    tcsetattr(STDIN_FILENO, TCSANOW, &raw)
    atexit { restoreTerminal() }
}

func restoreTerminal() {
    guard var original = savedTerminal.withLock({ state -> termios? in defer { state = nil }; return state }) else { return }
    tcsetattr(STDIN_FILENO, TCSANOW, &original)
    FileHandle.standardOutput.write(Data("\u{1B}[?25h".utf8))   // cursor back on
}

// MARK: arguments

var urls: [URL] = []
var directory = FileManager.default.currentDirectoryPath
var stateDirectory: String?
do {
    let arguments = Array(CommandLine.arguments.dropFirst())
    if arguments.contains("--help") || arguments.contains("-h") {
        print("""
        OVERVIEW: Download URLs with per-item progress; pause, resume and cancel them from the keyboard.

        \(usage)

        ARGUMENTS:
          <url>               http or https URLs.

        OPTIONS:
          -d <dir>            Directory for the files (default: current directory).
          --state-dir <dir>   Resume records (default: <dir>/.halftunes); a later run resumes unfinished items.
          -h, --help          Show help information.

        KEYS (when stdin is a terminal):
          up/down, 1-9        Select an item.
          p / r / c           Pause / resume / cancel the selected item.
          q                   Quit; unfinished items keep their resume data.

        Without a terminal on stdin, runs until every item is done and prints one line per event.
        Exit status: 0 when no item failed (cancelled ones count as done), 1 otherwise, 130 after Ctrl-C.
        """)
        exit(0)
    }
    var index = 0
    while index < arguments.count {
        let argument = arguments[index]
        switch argument {
        case "-d", "--state-dir":
            index += 1
            guard index < arguments.count else { fail("Missing value for '\(argument)'", 64) }
            if argument == "-d" { directory = arguments[index] } else { stateDirectory = arguments[index] }
        default:
            guard !argument.hasPrefix("-") else { fail("Unknown option '\(argument)'", 64) }
            guard let url = URL(string: argument), ["http", "https"].contains(url.scheme?.lowercased() ?? ""), url.host != nil else {
                fail("The value '\(argument)' is invalid for '<url>': expected an http or https URL", 64)
            }
            urls.append(url)
        }
        index += 1
    }
    guard !urls.isEmpty else { fail("Missing expected argument '<url> ...'", 64) }
}

// MARK: model

let isInteractive = isatty(STDIN_FILENO) == 1 && isatty(STDOUT_FILENO) == 1

/// What the screen shows; guarded by a mutex because download callbacks arrive on any thread.
struct Screen {
    var items: [Download] = []
    var selected = 0
    var drawnLines = 0
    var message = ""
}
let screen = Mutex(Screen())

func name(_ download: Download) -> String { download.destination.lastPathComponent }

func stateText(_ state: DownloadState) -> String {
    switch state {
    case .queued: "queued"
    case .running: "downloading"
    case .waitingForConnectivity: "waiting for network"
    case .paused: "paused"
    case .completed: "done"
    case .failed(let error): error == .cancelled ? "cancelled" : "failed: \(error)"
    }
}

func line(_ download: Download, number: Int, selected: Bool) -> String {
    let progress = download.progress
    let fraction = progress.fractionCompleted ?? 0
    let filled = Int(fraction * 20)
    let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: 20 - filled)
    let rate = download.state == .running && progress.bytesPerSecond > 0 ? String(format: " %.1f MiB/s", progress.bytesPerSecond / 1_048_576) : ""
    let percent = progress.totalBytes == nil ? "  ?%" : String(format: "%3d%%", Int(fraction * 100))
    return "\(selected ? ">" : " ") \(number). \(name(download).padding(toLength: 24, withPad: " ", startingAt: 0)) [\(bar)] \(percent)\(rate)  \(stateText(download.state))"
}

/// Redraws every item line in place (cursor up, clear line), interactive mode only.
func redraw() {
    let text = screen.withLock { screen -> String in
        var text = screen.drawnLines > 0 ? "\u{1B}[\(screen.drawnLines)A" : ""
        for (index, item) in screen.items.enumerated() {
            text += "\r\u{1B}[K" + line(item, number: index + 1, selected: index == screen.selected) + "\n"
        }
        text += "\r\u{1B}[K" + (screen.message.isEmpty ? "keys: up/down 1-9 select, p pause, r resume, c cancel, q quit" : screen.message) + "\n"
        screen.drawnLines = screen.items.count + 1
        return text
    }
    FileHandle.standardOutput.write(Data(text.utf8))
}

func allDone() -> Bool { screen.withLock { $0.items.allSatisfy { $0.state.isFinal } } }

func finish(_ agent: DownloadAgent, interrupted: Bool = false) async -> Never {
    await agent.shutdown()
    if isInteractive { redraw() }
    restoreTerminal()
    let items = screen.withLock { $0.items }
    let failed = items.contains { if case .failed(let error) = $0.state { error != .cancelled } else { false } }
    exit(interrupted ? 130 : failed ? 1 : 0)
}

// MARK: main

let monitor = PathMonitor()
let agent: DownloadAgent
do {
    let state = URL(fileURLWithPath: stateDirectory ?? directory + "/.halftunes")
    do {
        try monitor.start()
        agent = try DownloadAgent(configuration: .init(stateDirectory: state), monitor: monitor)
    } catch let error as ReachabilityError {
        // No netlink (a locked-down container): downloads still work, just without path awareness.
        FileHandle.standardError.write(Data("warning: not watching the network (\(error)); a drop is noticed by the transfer itself\n".utf8))
        agent = try DownloadAgent(configuration: .init(stateDirectory: state))
    }
} catch {
    fail("\(error)", 1)
}

Task {
    let restored = await agent.restoreDownloads()
    var items: [Download] = []
    for url in urls {
        let destination = URL(fileURLWithPath: directory).appendingPathComponent(
            url.lastPathComponent.isEmpty || url.lastPathComponent == "/" ? "index.html" : url.lastPathComponent).standardizedFileURL
        if let earlier = restored.first(where: { $0.url == url && $0.destination == destination }) {
            items.append(earlier)
            continue
        }
        do {
            items.append(try await agent.download(from: url, to: destination))
        } catch {
            fail("\(url.absoluteString): \(error)", 1)
        }
    }
    // Earlier items not asked for this time stay paused on disk for a later run.
    for download in restored where !items.contains(download) { await download.pause() }
    screen.withLock { $0.items = items }

    // `events` replays what happened before this subscription, so no early event is lost.
    var printers: [Task<Void, Never>] = []
    for (index, download) in items.enumerated() where !isInteractive {
        printers.append(Task {
          for await event in download.events {
            let text: String
            switch event {
            case .started: text = "started"
            case .resumed(let offset): text = "resumed at \(offset) bytes"
            case .waitingForConnectivity: text = "waiting for network"
            case .waitingForServer(let error): text = "waiting for server: \(error)"
            case .waiting(let reason): text = "waiting: \(reason)"
            case .restartedFromZero(let reason): text = "restarted from zero: \(reason)"
            case .retrying(let delay, let error): text = "retrying in \(delay): \(error)"
            case .paused: text = "paused"
            case .completed(let url): text = "done: \(url.path)"
            case .failed(let error): text = error == .cancelled ? "cancelled" : "failed: \(error)"
            case .sourceDropped(let mirror, let reason): text = "dropped mirror \(mirror): \(reason)"
            }
            // FileHandle writes are unbuffered, so a pipe sees each line as it happens.
            FileHandle.standardOutput.write(Data("\(index + 1). \(name(download)): \(text)\n".utf8))
          }
        })
    }

    if isInteractive {
        enterRawMode()
        FileHandle.standardOutput.write(Data("\u{1B}[?25l".utf8))   // hide the cursor while redrawing
        let keys = Thread { readKeys(agent) }
        keys.start()
    }
    while !allDone() {
        if isInteractive { redraw() }
        try? await Task.sleep(for: .milliseconds(isInteractive ? 200 : 100))
    }
    // Every stream has ended (all items are final): let the last lines out before exiting.
    for printer in printers { await printer.value }
    await finish(agent)
}

/// Reads keys from the raw terminal on a plain thread (read(2) blocks).
func readKeys(_ agent: DownloadAgent) {
    var escape: [UInt8] = []
    while true {
        var byte: UInt8 = 0
        guard read(STDIN_FILENO, &byte, 1) == 1 else { return }
        if !escape.isEmpty || byte == 0x1B {
            escape.append(byte)
            // Arrow keys: ESC [ A (up) / ESC [ B (down).
            if escape.count == 3 {
                let delta = escape[2] == UInt8(ascii: "A") ? -1 : escape[2] == UInt8(ascii: "B") ? 1 : 0
                screen.withLock { $0.selected = max(0, min($0.items.count - 1, $0.selected + delta)) }
                escape = []
            }
            continue
        }
        let key = Character(Unicode.Scalar(byte))
        if let digit = key.wholeNumberValue, (1...9).contains(digit) {
            screen.withLock { if digit <= $0.items.count { $0.selected = digit - 1 } }
            continue
        }
        let selected = screen.withLock { $0.items.isEmpty ? nil : $0.items[$0.selected] }
        guard let selected else { continue }
        switch key {
        case "p": Task { await selected.pause() }; screen.withLock { $0.message = "pausing \(name(selected))" }
        case "r": Task { await selected.resume() }; screen.withLock { $0.message = "resuming \(name(selected))" }
        case "c": Task { await selected.cancel() }; screen.withLock { $0.message = "cancelling \(name(selected))" }
        case "q": Task { await finish(agent, interrupted: false) }; return
        default: break
        }
    }
}

// Ctrl-C: keep resume data, restore the terminal, exit 130 (SignalHandlers also unblocks SIGINT,
// which a parent may pass blocked, and leaves no window in which it is lost).
let interrupt = SignalHandlers.installBlocking([SIGINT], queue: .main) { _ in
    Task { await finish(agent, interrupted: true) }
}
dispatchMain()
