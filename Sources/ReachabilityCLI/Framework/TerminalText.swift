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

    /// A name someone else chose (a background session's identifier), shown so that two names
    /// that differ never look alike: besides what `escaped` writes out, every scalar that prints
    /// nothing or nothing visible (format characters such as U+200B ZERO WIDTH SPACE, other
    /// spaces, private-use, unassigned, combining marks) is written as `\u{...}`, and in a name
    /// whose letters come from more than one script (Latin "paypal" with a Cyrillic "а") every
    /// non-ASCII scalar is. A name in one script (Greek, Cyrillic, CJK alone) is kept.
    static func escapedName(_ text: String) -> String {
        let mixesScripts = Set(text.unicodeScalars.compactMap(script)).count > 1
        func hides(_ scalar: Unicode.Scalar) -> Bool {
            if needsEscape(scalar) { return true }
            if mixesScripts, !scalar.isASCII { return true }
            switch scalar.properties.generalCategory {
            case .format, .privateUse, .unassigned, .surrogate, .lineSeparator, .paragraphSeparator,
                 .nonspacingMark, .enclosingMark, .spacingMark:
                return true
            case .spaceSeparator:
                return scalar != " "
            default:
                return false
            }
        }
        guard text.unicodeScalars.contains(where: hides) else { return text }
        var result = ""
        for scalar in text.unicodeScalars {
            if needsEscape(scalar) {
                result += escaped(String(scalar))
            } else if hides(scalar) {
                result += "\\u{\(String(scalar.value, radix: 16, uppercase: true))}"
            } else {
                result.unicodeScalars.append(scalar)
            }
        }
        return result
    }

    /// The script a letter belongs to, by block (enough to tell look-alikes apart: Latin, Greek,
    /// Cyrillic, Armenian, Hebrew, Arabic, Cherokee, CJK and kana, Hangul, else the 256-scalar
    /// block); nil for what is not a letter (digits, punctuation and marks mix with anything).
    private static func script(_ scalar: Unicode.Scalar) -> String? {
        guard scalar.properties.isAlphabetic, scalar.properties.generalCategory != .nonspacingMark else { return nil }
        switch scalar.value {
        case 0x41...0x5A, 0x61...0x7A, 0xC0...0x24F, 0x1E00...0x1EFF, 0xFF21...0xFF3A, 0xFF41...0xFF5A: return "Latin"
        case 0x370...0x3FF, 0x1F00...0x1FFF: return "Greek"
        case 0x400...0x52F, 0x1C80...0x1C8F, 0x2DE0...0x2DFF, 0xA640...0xA69F: return "Cyrillic"
        case 0x530...0x58F: return "Armenian"
        case 0x590...0x5FF: return "Hebrew"
        case 0x600...0x6FF, 0x750...0x77F: return "Arabic"
        case 0x13A0...0x13FF, 0xAB70...0xABBF: return "Cherokee"
        case 0x3040...0x30FF, 0x3400...0x4DBF, 0x4E00...0x9FFF, 0xF900...0xFAFF: return "CJK"
        case 0xAC00...0xD7AF, 0x1100...0x11FF: return "Hangul"
        default: return "block-\(scalar.value >> 8)"
        }
    }

    private static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00...0x1F, 0x7F...0x9F, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069: true
        default: false
        }
    }
}
