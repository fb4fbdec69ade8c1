/// One D-Bus value as read from the system bus, bounded (see `SystemBusConnection`): strings
/// over `maximumStringLength` bytes, arrays over `maximumElements` and nesting deeper than
/// `maximumDepth` arrive as `.oversized`, never as the whole value, so a hostile peer's megabytes
/// cost a skip rather than memory.
indirect enum DBusValue: Sendable, Hashable {
    case boolean(Bool)
    case byte(UInt8)
    case int16(Int16)
    case uint16(UInt16)
    case int32(Int32)
    case uint32(UInt32)
    case int64(Int64)
    case uint64(UInt64)
    case double(Double)
    /// Strings and signatures.
    case string(String)
    case objectPath(String)
    case array([DBusValue])
    case structure([DBusValue])
    /// A dictionary entry (inside an array).
    case entry(key: DBusValue, value: DBusValue)
    case variant(DBusValue)
    /// A value beyond the reader's bounds, with its D-Bus signature and what was too big.
    case oversized(signature: String, reason: String)

    static let maximumStringLength = 4096
    static let maximumElements = 256
    static let maximumDepth = 8

    /// The value inside any variants.
    var unwrapped: DBusValue {
        if case .variant(let inner) = self { return inner.unwrapped }
        return self
    }

    // Typed views, looking through variants; nil for a value of another type.
    var uint32: UInt32? { if case .uint32(let value) = unwrapped { value } else { nil } }
    var boolean: Bool? { if case .boolean(let value) = unwrapped { value } else { nil } }
    var double: Double? { if case .double(let value) = unwrapped { value } else { nil } }
    var string: String? { if case .string(let value) = unwrapped { value } else { nil } }
    var objectPath: String? { if case .objectPath(let value) = unwrapped { value } else { nil } }
    var elements: [DBusValue]? { if case .array(let values) = unwrapped { values } else { nil } }

    /// The D-Bus type of the value, for log lines (`u`, `s`, `a(su)`, ...).
    var signature: String {
        switch self {
        case .boolean: return "b"
        case .byte: return "y"
        case .int16: return "n"
        case .uint16: return "q"
        case .int32: return "i"
        case .uint32: return "u"
        case .int64: return "x"
        case .uint64: return "t"
        case .double: return "d"
        case .string: return "s"
        case .objectPath: return "o"
        case .array(let values): return "a" + (values.first?.signature ?? "?")
        case .structure(let values): return "(" + values.map(\.signature).joined() + ")"
        case .entry(let key, let value): return "{" + key.signature + value.signature + "}"
        case .variant(let inner): return inner.signature
        case .oversized(let signature, _): return signature
        }
    }

    /// `'no' of type s`, `a value of type au with 100000 elements, more than 256`: for log lines.
    var typedDescription: String {
        if case .oversized(let signature, let reason) = self { return "a value of type \(signature) (\(reason))" }
        return "\(logDescription) of type \(signature)"
    }

    /// A short rendering for log lines: long strings and arrays are cut, control characters escaped.
    var logDescription: String {
        switch self {
        case .boolean(let value): return "\(value)"
        case .byte(let value): return "\(value)"
        case .int16(let value): return "\(value)"
        case .uint16(let value): return "\(value)"
        case .int32(let value): return "\(value)"
        case .uint32(let value): return "\(value)"
        case .int64(let value): return "\(value)"
        case .uint64(let value): return "\(value)"
        case .double(let value): return "\(value)"
        case .string(let value), .objectPath(let value):
            let cut = value.unicodeScalars.prefix(64).map { scalar -> String in
                scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) || scalar == "\\"
                    ? "\\u{\(String(scalar.value, radix: 16))}" : String(scalar)
            }.joined()
            return "'" + cut + (value.unicodeScalars.count > 64 ? "...' (\(value.utf8.count) bytes)" : "'")
        case .array(let values):
            let shown = values.prefix(4).map(\.logDescription).joined(separator: ", ")
            return "[" + shown + (values.count > 4 ? ", ... \(values.count) in all" : "") + "]"
        case .structure(let values): return "(" + values.map(\.logDescription).joined(separator: ", ") + ")"
        case .entry(let key, let value): return key.logDescription + ": " + value.logDescription
        case .variant(let inner): return inner.logDescription
        case .oversized(let signature, let reason): return "a value of type \(signature) (\(reason))"
        }
    }
}

/// What arrives from the system bus, decoded into Swift values by `SystemBusConnection`.
/// Pure data: the NetworkManager and ModemManager models are driven (and tested) with these.
enum SystemBusEvent: Sendable, Equatable {
    /// Properties of the objects of one service, by object path, then interface, then property
    /// (only the interfaces and properties the models asked for).
    typealias Objects = [String: [String: [String: DBusValue]]]

    /// `NameOwnerChanged` for a watched name (from the bus driver when `sender` is
    /// `org.freedesktop.DBus`); an empty owner means it left.
    case nameOwnerChanged(sender: String, name: String, newOwner: String)
    /// `org.freedesktop.DBus.Properties.PropertiesChanged`.
    case propertiesChanged(sender: String, path: String, interface: String, changed: [String: DBusValue])
    /// `org.freedesktop.DBus.ObjectManager.InterfacesAdded`.
    case interfacesAdded(sender: String, path: String, interfaces: [String: [String: DBusValue]])
    /// `org.freedesktop.DBus.ObjectManager.InterfacesRemoved`.
    case interfacesRemoved(sender: String, path: String, interfaces: [String])
    /// The answer to a request made with `SystemBusConnection.call`, and who sent it (the
    /// unique name of the connection that answered a call to a well-known name).
    case reply(tag: Int, sender: String, SystemBusReply)
    /// A message from a peer whose body does not have the shape its member promises (or that
    /// sd-bus could not read); `detail` says what.
    case malformed(sender: String, member: String, detail: String)
}

/// An answer to one method call.
enum SystemBusReply: Sendable, Equatable {
    case string(String)
    case uint32(UInt32)
    case objects(SystemBusEvent.Objects)
    /// One interface's properties (Properties.GetAll), the wanted ones only.
    case properties([String: DBusValue])
    /// A D-Bus error reply (`org.freedesktop.DBus.Error.NameHasNoOwner`, ...), or a reply of
    /// another shape than asked for.
    case error(name: String, message: String)
}
