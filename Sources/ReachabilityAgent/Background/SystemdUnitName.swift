/// A systemd user unit a background session names for its launch events (`launchUnit`): a
/// service, or a template service (`name@.service`) whose instance the agent fills with the
/// session identifier, escaped as `systemd-escape` does, so the unit can say
/// `Environment=REACHABILITY_BACKGROUND_SESSION=%I`. Pure.
package enum SystemdUnitName {
    /// Why `name` is not a service unit name the agent will start, or nil.
    package static func problem(_ name: String) -> String? {
        guard name.hasSuffix(".service"), name.utf8.count > ".service".utf8.count, name.utf8.count <= 255 else {
            return "'\(name)' is not a service unit name (NAME.service or NAME@.service, at most 255 bytes)"
        }
        let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:-_.\\@")
        guard name.allSatisfy({ allowed.contains($0) }), !name.hasPrefix("-"), name.filter({ $0 == "@" }).count <= 1 else {
            return "'\(name)' holds characters systemd does not allow in a unit name"
        }
        return nil
    }

    /// Whether `name` is a template (`name@.service`).
    package static func isTemplate(_ name: String) -> Bool { name.hasSuffix("@.service") }

    /// The unit to start for session `identifier`: a template gets the escaped identifier as
    /// its instance; any other name is started as it is.
    package static func unit(_ name: String, for identifier: String) -> String {
        guard isTemplate(name) else { return name }
        return String(name.dropLast(".service".count)) + escaped(identifier) + ".service"
    }

    /// systemd-escape's rules: ASCII letters, digits, `:`, `_` and `.` (but not a leading one)
    /// stay, `/` becomes `-`, every other byte `\xHH`.
    package static func escaped(_ text: String) -> String {
        var result = ""
        for (index, byte) in text.utf8.enumerated() {
            let scalar = Unicode.Scalar(byte)
            let isPlain = (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
                || byte == UInt8(ascii: ":") || byte == UInt8(ascii: "_") || (byte == UInt8(ascii: ".") && index > 0)
            if isPlain {
                result.unicodeScalars.append(scalar)
            } else if byte == UInt8(ascii: "/") {
                result += "-"
            } else {
                let hex = String(byte, radix: 16)
                result += "\\x" + (hex.count == 1 ? "0" + hex : hex)
            }
        }
        return result
    }
}
