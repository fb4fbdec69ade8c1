/// Text from outside the program (arguments, URLs, file and interface names, server replies)
/// made safe to print on a terminal.
///
/// A `-H` value, a URL's file name or an interface name can hold CR, LF or ESC: echoed raw in a
/// diagnostic they would overwrite the line, forge another line (`Error: ...` after a CR) or send
/// the terminal escape sequences (retitle the window, clear the screen, remap keys on some
/// terminals). Every human-readable line that carries such text goes through `escaped`; JSON
/// output needs nothing more (the encoder already escapes control characters).
enum TerminalText {
    /// `text` with every control character written out: `\r`, `\n`, `\t`, `\x1B` for the other C0
    /// controls and DEL, `\u{9B}` for C1 controls (U+009B is CSI on many terminals), and the same
    /// for the bidirectional overrides and isolates that reorder what is shown (U+202A...U+202E,
    /// U+2066...U+2069, U+200E/U+200F). Everything else, non-ASCII letters included, is kept.
    static func escaped(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: needsEscape) else { return text }
        var result = ""
        result.reserveCapacity(text.utf8.count + 8)
        for scalar in text.unicodeScalars {
            guard needsEscape(scalar) else {
                result.unicodeScalars.append(scalar)
                continue
            }
            switch scalar {
            case "\r": result += "\\r"
            case "\n": result += "\\n"
            case "\t": result += "\\t"
            default:
                let hex = String(scalar.value, radix: 16, uppercase: true)
                result += scalar.value < 0x80 ? "\\x" + (hex.count < 2 ? "0" + hex : hex) : "\\u{\(hex)}"
            }
        }
        return result
    }

    private static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00...0x1F, 0x7F...0x9F, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069: true
        default: false
        }
    }
}
