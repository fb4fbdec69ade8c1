import FoundationEssentials
import Glibc
import LinuxSystem

/// Number and error text for people, by hand: `String(format:)` and `localizedDescription` live
/// in Foundation proper, which would link ICU into the CLI for a few digits.
enum TextFormat {
    /// `value` rounded to `fractionDigits` decimals (half away from zero): `12.0`, `0.5`.
    static func decimal(_ value: Double, fractionDigits: Int) -> String {
        guard value.isFinite else { return "\(value)" }
        var scale = 1.0
        for _ in 0..<fractionDigits { scale *= 10 }
        let scaled = Int64((abs(value) * scale).rounded())
        let whole = scaled / Int64(scale)
        let sign = value < 0 && scaled != 0 ? "-" : ""
        guard fractionDigits > 0 else { return "\(sign)\(whole)" }
        return "\(sign)\(whole).\(zeroPadded(Int(scaled % Int64(scale)), width: fractionDigits))"
    }

    /// `value` in decimal, left-padded with zeros to `width` digits: `07`.
    static func zeroPadded(_ value: Int, width: Int) -> String {
        let digits = String(value)
        return digits.count >= width ? digits : String(repeating: "0", count: width - digits.count) + digits
    }

    /// `text` right-aligned in `width` columns (longer text is left as it is).
    static func rightAligned(_ text: String, width: Int) -> String {
        text.count >= width ? text : String(repeating: " ", count: width - text.count) + text
    }

    /// `text` left-aligned in `width` columns (longer text is left as it is).
    static func leftAligned(_ text: String, width: Int) -> String {
        text.count >= width ? text : text + String(repeating: " ", count: width - text.count)
    }

    /// What went wrong, for a message that already names the file: the OS reason
    /// (`No such file or directory`) for file-system errors, else the error's own description.
    static func reason(_ error: any Error) -> String {
        if let cocoa = error as? CocoaError, let posix = cocoa.underlying as? POSIXError {
            return Errno(posix.code.rawValue).description
        }
        if let posix = error as? POSIXError { return Errno(posix.code.rawValue).description }
        if let cocoa = error as? CocoaError {
            return "file system error \(cocoa.code.rawValue)" + (cocoa.filePath.map { " (\($0))" } ?? "")
        }
        return "\(error)"
    }
}
