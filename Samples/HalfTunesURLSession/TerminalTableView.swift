// The table view, in a terminal: one line per track, redrawn in place on a TTY; without one,
// a line per event (a row's state changing, progress every 10 %), for logs and tests.

import Foundation

@MainActor
final class TerminalTableView {
    /// What a cell shows.
    struct Row: Equatable {
        var number: Int
        var name: String
        var progress: Float
        var totalSize: String?
        var state: String

        /// `>1. NAME   [#####...............]  25% of 5.2 MB  downloading`
        func drawn(selected: Bool) -> String {
            let filled = max(0, min(20, Int(progress * 20)))
            let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: 20 - filled)
            return "\(selected ? ">" : " ")\(number). \(name.padding(toLength: 24, withPad: " ", startingAt: 0)) [\(bar)] "
                + "\(String(format: "%3d%%", Int(progress * 100)))\(totalSize.map { " of \($0)" } ?? "")  \(state)"
        }

        /// `1. NAME: 25% of 5.2 MB, downloading`
        var logLine: String {
            "\(number). \(name): \(Int(progress * 100))%\(totalSize.map { " of \($0)" } ?? ""), \(state)"
        }
    }

    let isInteractive: Bool
    private(set) var rows: [Int: Row] = [:]
    private var printed: [Int: Row] = [:]
    private var message = ""
    private var drawnLines = 0
    var selectedRow = 0 { didSet { if isInteractive { redraw() } } }

    init(isInteractive: Bool) {
        self.isInteractive = isInteractive
    }

    /// iOS: `tableView.reloadRows(at: [IndexPath(row: index, section: 0)], with: .none)`.
    func reloadRow(at index: Int, _ row: Row) {
        rows[index] = row
        if isInteractive { redraw(); return }
        let last = printed[index]
        if last?.state != row.state || Int(row.progress * 10) > Int((last?.progress ?? 0) * 10) {
            printed[index] = row
            print(row.logLine)
        }
    }

    /// A line about one track or the program (interactive: shown under the table).
    func show(event: String) {
        if isInteractive { message = event; redraw() } else { print(event) }
    }

    func show(message text: String) { show(event: text) }

    func redraw() {
        var text = drawnLines > 0 ? "\u{1B}[\(drawnLines)A" : ""
        for index in rows.keys.sorted() {
            text += "\r\u{1B}[K" + (rows[index]?.drawn(selected: index == selectedRow) ?? "") + "\n"
        }
        text += "\r\u{1B}[K" + (message.isEmpty ? "keys: up/down 1-9 select, p pause, r resume, c cancel, q quit" : message) + "\n"
        drawnLines = rows.count + 1
        FileHandle.standardOutput.write(Data(text.utf8))
    }

    private func print(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }
}
