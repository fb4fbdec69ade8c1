/// A JSON value that keeps object keys in the order they were written, so every line of
/// `--json` output has the same, readable key order (time and status first).
package enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    case integer(Int)
    case string(String)
    case array([JSONValue])
    case object([Member])

    /// One key/value pair of an object.
    package struct Member: Sendable, Equatable {
        package var key: String
        package var value: JSONValue

        package init(key: String, value: JSONValue) {
            self.key = key
            self.value = value
        }
    }

    /// Builds an object from pairs, keeping their order.
    package static func object(_ pairs: KeyValuePairs<String, JSONValue>) -> JSONValue {
        .object(pairs.map { Member(key: $0.key, value: $0.value) })
    }

    /// A string, or null.
    package static func string(_ value: String?) -> JSONValue {
        value.map(JSONValue.string) ?? .null
    }

    /// Compact text on one line (no newlines inside), suitable for NDJSON.
    package var serialized: String {
        var text = ""
        write(to: &text)
        return text
    }

    private func write(to text: inout String) {
        switch self {
        case .null: text += "null"
        case .bool(let value): text += value ? "true" : "false"
        case .integer(let value): text += String(value)
        case .string(let value): Self.writeString(value, to: &text)
        case .array(let values):
            text += "["
            for (position, value) in values.enumerated() {
                if position > 0 { text += "," }
                value.write(to: &text)
            }
            text += "]"
        case .object(let members):
            text += "{"
            for (position, member) in members.enumerated() {
                if position > 0 { text += "," }
                Self.writeString(member.key, to: &text)
                text += ":"
                member.value.write(to: &text)
            }
            text += "}"
        }
    }

    /// RFC 8259 escaping: quote, backslash and control characters; everything else as UTF-8.
    private static func writeString(_ value: String, to text: inout String) {
        text += "\""
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": text += "\\\""
            case "\\": text += "\\\\"
            case "\n": text += "\\n"
            case "\r": text += "\\r"
            case "\t": text += "\\t"
            case _ where scalar.value < 0x20:
                let hex = String(scalar.value, radix: 16)
                text += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: text.unicodeScalars.append(scalar)
            }
        }
        text += "\""
    }
}
