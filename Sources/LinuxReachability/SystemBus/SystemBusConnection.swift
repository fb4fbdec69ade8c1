// The only file in LinuxReachability that imports CSystemdBus: one sd-bus connection to the
// system bus, its requests and signal matches, and the decoding of what arrives into Swift values
// (`SystemBusEvent`). C types stay in here.
//
// Longer than 400 lines on purpose: the decoders run inside sd_bus_process on the owner's thread
// and read the connection's private state (requests in flight, the properties wanted), and keeping
// them here keeps every C type in one file.
import CSystemdBus
import Glibc
import LinuxSystem

/// libsystemd, loaded on first use (see CSystemdBus/shim.h).
enum SystemdBusLibrary {
    /// The loaded function table, or why libsystemd could not be loaded. A lazy static is
    /// initialised exactly once (swift_once), which dlopen's error text needs.
    private static let loaded: Result<API, ReachabilityError> = {
        var table = csdbus_api()
        if let failure = csdbus_load(&table) {
            return .failure(ReachabilityError(.systemBus,
                "cannot load \(CSDBUS_LIBRARY) (\(String(cString: failure))); install libsystemd0"))
        }
        let api = UnsafeMutablePointer<csdbus_api>.allocate(capacity: 1)   // never freed: the process's libsystemd
        api.initialize(to: table)
        return .success(API(table: api))
    }()

    static func api() throws(ReachabilityError) -> API { try loaded.get() }

    /// The loaded function table. Immutable once loaded, so it may be shared between threads.
    struct API: @unchecked Sendable {
        let table: UnsafeMutablePointer<csdbus_api>
    }
}

/// One connection to a D-Bus system bus through sd-bus: asynchronous method calls, signal
/// matches, and a file descriptor to poll. Nothing here blocks: calls are sent and their replies
/// arrive as `SystemBusEvent.reply` from `process()`.
///
/// `@unchecked Sendable` because it owns the `sd_bus` handle, which sd-bus does not lock.
/// Invariant: one thread at a time uses it. `PathMonitor.start()` uses it on the caller's thread
/// before the monitor thread exists; from then on only the monitor thread does (its poll loop
/// calls `process()`), and that thread closes it when it ends.
final class SystemBusConnection: @unchecked Sendable {
    /// What a reply's body must be.
    enum Shape: Sendable {
        /// `s` (GetNameOwner).
        case string
        /// `u` (GetConnectionUnixProcessID).
        case uint32
        /// `a{oa{sa{sv}}}` (ObjectManager.GetManagedObjects).
        case objects
        /// `a{sv}` (Properties.GetAll of `interface`), keeping the properties `wanted` names.
        case properties(interface: String)
    }

    let address: String
    private let api: UnsafeMutablePointer<csdbus_api>
    private var bus: OpaquePointer?
    /// Interfaces whose properties are decoded, and which of their properties; everything else
    /// in a message is skipped without being copied.
    private let wanted: [String: Set<String>]
    /// Requests waiting for their reply, by the request's cookie.
    private var pending: [UInt64: (tag: Int, shape: Shape)] = [:]
    /// Events decoded by the message handler during `process()`.
    private var received: [SystemBusEvent] = []
    /// Messages handled per `process()` call, so a peer flooding the bus cannot keep the
    /// monitor thread from netlink; the caller polls again at once when more are queued.
    private static let messagesPerBatch = 256
    /// How long a method call may wait for its reply before sd-bus answers it with a timeout error.
    private static let callTimeoutMicroseconds: UInt64 = 10_000_000
    /// Objects kept from one GetManagedObjects reply or one property dictionary.
    static let maximumObjects = 4096

    /// Connects (a non-blocking connect; authentication continues in `process()`). Throws
    /// `ReachabilityError(.systemBus)` when libsystemd is missing or the address is refused.
    init(address: String, wanted: [String: Set<String>]) throws(ReachabilityError) {
        api = try SystemdBusLibrary.api().table
        self.address = address
        self.wanted = wanted
        var handle: OpaquePointer?
        var rc = api.pointee.bus_new(&handle)
        guard rc >= 0, let handle else { throw Self.failure("cannot create an sd-bus connection", rc) }
        bus = handle
        rc = api.pointee.bus_set_address(handle, address)
        if rc >= 0 { rc = api.pointee.bus_set_bus_client(handle, 1) }
        // No file descriptors from peers: nothing here needs them, and a hostile peer could
        // otherwise park descriptors in this process until the message is freed.
        if rc >= 0 { rc = api.pointee.bus_negotiate_fds(handle, 0) }
        if rc >= 0 { _ = api.pointee.bus_set_description(handle, "reachability") }
        if rc >= 0 { rc = api.pointee.bus_start(handle) }
        if rc < 0 {
            _ = api.pointee.bus_flush_close_unref(handle)
            bus = nil
            throw Self.failure("cannot connect to the system bus at \(address)", rc)
        }
    }

    deinit { close() }

    /// Closes the connection; no handler runs afterwards (sd-bus frees every slot with the bus).
    func close() {
        guard let bus else { return }
        _ = api.pointee.bus_flush_close_unref(bus)
        self.bus = nil
        pending = [:]
    }

    /// Asks the bus to deliver signals matching `rule` (sent asynchronously; a refusal arrives
    /// as a `malformed` event from the bus driver).
    func addMatch(_ rule: String) throws(ReachabilityError) {
        guard let bus else { throw ReachabilityError(.systemBus, "the system bus connection is closed") }
        // userdata is this object, unretained: handlers run only inside `process()`, which the
        // owner calls while holding a strong reference, and every slot is floating (owned by the
        // bus), so `close()` frees them all before this object can go away.
        let rc = api.pointee.bus_add_match_async(bus, nil, rule, systemBusHandler, systemBusHandler,
                                                 Unmanaged.passUnretained(self).toOpaque())
        if rc < 0 { throw Self.failure("cannot add the match \(rule)", rc) }
    }

    /// Sends a method call with at most one string argument; its answer arrives from
    /// `process()` as `.reply(tag: tag, ...)`.
    func call(tag: Int, destination: String, path: String, interface: String, member: String,
              argument: String? = nil, expecting shape: Shape) throws(ReachabilityError) {
        guard let bus else { throw ReachabilityError(.systemBus, "the system bus connection is closed") }
        var message: OpaquePointer?
        var rc = api.pointee.message_new_method_call(bus, &message, destination, path, interface, member)
        guard rc >= 0, let message else { throw Self.failure("cannot build the call \(interface).\(member)", rc) }
        defer { _ = api.pointee.message_unref(message) }
        // Never start a service by asking it: a disabled NetworkManager stays off (system bus
        // activation would otherwise launch it for a call to its name).
        rc = api.pointee.message_set_auto_start(message, 0)
        if rc < 0 { throw Self.failure("cannot build the call \(interface).\(member)", rc) }
        if let argument {
            rc = argument.withCString { api.pointee.message_append_basic(message, Self.type("s"), $0) }
            if rc < 0 { throw Self.failure("cannot build the call \(interface).\(member)", rc) }
        }
        rc = api.pointee.bus_call_async(bus, nil, message, systemBusHandler, Unmanaged.passUnretained(self).toOpaque(),
                                        Self.callTimeoutMicroseconds)
        if rc < 0 { throw Self.failure("cannot send \(interface).\(member)", rc) }
        var cookie: UInt64 = 0
        rc = api.pointee.message_get_cookie(message, &cookie)
        if rc < 0 { throw Self.failure("cannot send \(interface).\(member)", rc) }
        pending[cookie] = (tag, shape)
    }

    /// The descriptor and events to poll for, nil once closed.
    var pollRequest: PollEntry? {
        guard let bus else { return nil }
        let fd = api.pointee.bus_get_fd(bus)
        let events = api.pointee.bus_get_events(bus)
        guard fd >= 0, events >= 0 else { return nil }
        return PollEntry(FileDescriptor(rawValue: fd), events & Int32(POLLOUT) != 0 ? .readableOrWritable : .readable)
    }

    /// When sd-bus needs `process()` called even without traffic (a reply's timeout), if ever.
    var deadline: ContinuousClock.Instant? {
        guard let bus else { return nil }
        var usec: UInt64 = 0
        guard api.pointee.bus_get_timeout(bus, &usec) >= 0, usec != UInt64.max else { return nil }
        // sd-bus answers in CLOCK_MONOTONIC microseconds; ContinuousClock may be another clock.
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        let nowMicroseconds = UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1000
        let remaining = usec > nowMicroseconds ? usec - nowMicroseconds : 0
        return ContinuousClock.now + .microseconds(Int64(min(remaining, 3_600_000_000)))
    }

    /// Reads and dispatches what the bus sent. Returns the decoded events and whether more are
    /// queued (then call again without waiting: sd-bus may hold read messages the descriptor no
    /// longer announces). Throws when the connection is lost.
    func process() throws(ReachabilityError) -> (events: [SystemBusEvent], hasMore: Bool) {
        guard let bus else { throw ReachabilityError(.systemBus, "the system bus connection is closed") }
        var hasMore = false
        for _ in 0..<Self.messagesPerBatch {
            let rc = api.pointee.bus_process(bus, nil)
            if rc < 0 {
                received = []
                throw Self.failure("the system bus connection failed", rc)
            }
            hasMore = rc > 0
            if !hasMore { break }
        }
        if api.pointee.bus_is_open(bus) <= 0 {
            received = []
            throw ReachabilityError(.systemBus, "the system bus closed the connection")
        }
        defer { received = [] }
        return (received, hasMore)
    }

    // MARK: Decoding (inside sd_bus_process, on the owner's thread)

    /// Every reply and matched signal comes here (through `systemBusHandler`).
    fileprivate func handle(_ message: OpaquePointer) {
        var type: UInt8 = 0
        guard api.pointee.message_get_type(message, &type) >= 0 else { return }
        let sender = string(api.pointee.message_get_sender(message)) ?? ""
        if type == CSDBUS_MESSAGE_METHOD_RETURN || type == CSDBUS_MESSAGE_METHOD_ERROR {
            var cookie: UInt64 = 0
            guard api.pointee.message_get_reply_cookie(message, &cookie) >= 0 else { return }
            guard let request = pending.removeValue(forKey: cookie) else {
                // An AddMatch answer (sd-bus sends those itself): only a refusal is news.
                if type == CSDBUS_MESSAGE_METHOD_ERROR {
                    received.append(.malformed(sender: sender, member: "AddMatch", detail: errorText(message)))
                }
                return
            }
            if type == CSDBUS_MESSAGE_METHOD_ERROR {
                let error = api.pointee.message_get_error(message)
                received.append(.reply(tag: request.tag, sender: sender,
                                       .error(name: string(error?.pointee.name) ?? "unknown error",
                                              message: string(error?.pointee.message) ?? "")))
                return
            }
            received.append(.reply(tag: request.tag, sender: sender, decodeReply(message, shape: request.shape)))
            return
        }
        guard type == CSDBUS_MESSAGE_SIGNAL else { return }
        let interface = string(api.pointee.message_get_interface(message)) ?? ""
        let member = string(api.pointee.message_get_member(message)) ?? ""
        let path = string(api.pointee.message_get_path(message)) ?? ""
        let signature = string(api.pointee.message_get_signature(message, 1)) ?? ""
        do throws(DecodeError) {
            switch (interface, member) {
            case ("org.freedesktop.DBus", "NameOwnerChanged"):
                try expect(signature, "sss")
                let name = try readString(message)
                _ = try readString(message)
                received.append(.nameOwnerChanged(sender: sender, name: name, newOwner: try readString(message)))
            case ("org.freedesktop.DBus.Properties", "PropertiesChanged"):
                try expect(signature, "sa{sv}as")
                let changedInterface = try readString(message)
                guard let properties = wanted[changedInterface] else { return }
                received.append(.propertiesChanged(sender: sender, path: path, interface: changedInterface,
                                                   changed: try readProperties(message, keeping: properties)))
            case ("org.freedesktop.DBus.ObjectManager", "InterfacesAdded"):
                try expect(signature, "oa{sa{sv}}")
                let object = try readString(message, type: "o")
                received.append(.interfacesAdded(sender: sender, path: object, interfaces: try readInterfaces(message)))
            case ("org.freedesktop.DBus.ObjectManager", "InterfacesRemoved"):
                try expect(signature, "oas")
                let object = try readString(message, type: "o")
                received.append(.interfacesRemoved(sender: sender, path: object, interfaces: try readStrings(message)))
            default:
                return
            }
        } catch {
            received.append(.malformed(sender: sender, member: "\(interface).\(member)", detail: error.detail))
        }
    }

    private func decodeReply(_ message: OpaquePointer, shape: Shape) -> SystemBusReply {
        let signature = string(api.pointee.message_get_signature(message, 1)) ?? ""
        do throws(DecodeError) {
            switch shape {
            case .string:
                try expect(signature, "s")
                return .string(try readString(message))
            case .uint32:
                try expect(signature, "u")
                return .uint32(try readBasic(message, Self.type("u"), UInt32(0)))
            case .objects:
                try expect(signature, "a{oa{sa{sv}}}")
                return .objects(try readObjects(message))
            case .properties(let interface):
                try expect(signature, "a{sv}")
                return .properties(try readProperties(message, keeping: wanted[interface] ?? []))
            }
        } catch {
            return .error(name: "reachability.MalformedReply", message: error.detail)
        }
    }

    private struct DecodeError: Error {
        var detail: String
    }

    private func expect(_ signature: String, _ expected: String) throws(DecodeError) {
        if signature != expected { throw DecodeError(detail: "signature '\(signature)' where '\(expected)' was expected") }
    }

    private func check(_ rc: Int32) throws(DecodeError) {
        if rc < 0 { throw DecodeError(detail: "unreadable message: \(String(cString: strerror(-rc)))") }
    }

    private func enter(_ message: OpaquePointer, _ type: Character, _ contents: String) throws(DecodeError) {
        let rc = contents.withCString { api.pointee.message_enter_container(message, Self.type(type), $0) }
        if rc <= 0 { throw DecodeError(detail: "unreadable message (container \(type)\(contents))") }
    }

    private func exit(_ message: OpaquePointer) throws(DecodeError) {
        try check(api.pointee.message_exit_container(message))
    }

    /// Whether another element is left in the current container.
    private func hasNext(_ message: OpaquePointer) throws(DecodeError) -> Bool {
        let rc = api.pointee.message_peek_type(message, nil, nil)
        try check(rc)
        return rc > 0
    }

    private func skip(_ message: OpaquePointer, _ types: String) throws(DecodeError) {
        try check(types.withCString { api.pointee.message_skip(message, $0) })
    }

    /// A string, object path or signature, at most `DBusValue.maximumStringLength` bytes.
    private func readString(_ message: OpaquePointer, type: Character = "s") throws(DecodeError) -> String {
        var pointer: UnsafePointer<CChar>?
        try check(api.pointee.message_read_basic(message, Self.type(type), &pointer))
        guard let pointer else { throw DecodeError(detail: "unreadable message (empty \(type))") }
        let length = strnlen(pointer, DBusValue.maximumStringLength + 1)
        guard length <= DBusValue.maximumStringLength else {
            throw DecodeError(detail: "a name or path longer than \(DBusValue.maximumStringLength) bytes")
        }
        return String(cString: pointer)
    }

    /// `as`, at most `maximumElements` kept.
    private func readStrings(_ message: OpaquePointer) throws(DecodeError) -> [String] {
        try enter(message, "a", "s")
        var strings: [String] = []
        while try hasNext(message) {
            if strings.count < DBusValue.maximumElements { strings.append(try readString(message)) } else { try skip(message, "s") }
        }
        try exit(message)
        return strings
    }

    /// `a{oa{sa{sv}}}`: only objects with a wanted interface are kept, at most `maximumObjects`.
    private func readObjects(_ message: OpaquePointer) throws(DecodeError) -> SystemBusEvent.Objects {
        var objects: SystemBusEvent.Objects = [:]
        try enter(message, "a", "{oa{sa{sv}}}")
        while try hasNext(message) {
            try enter(message, "e", "oa{sa{sv}}")
            let path = try readString(message, type: "o")
            let interfaces = try readInterfaces(message)
            if !interfaces.isEmpty, objects.count < Self.maximumObjects { objects[path] = interfaces }
            try exit(message)
        }
        try exit(message)
        return objects
    }

    /// `a{sa{sv}}`: wanted interfaces only, with their wanted properties.
    private func readInterfaces(_ message: OpaquePointer) throws(DecodeError) -> [String: [String: DBusValue]] {
        var interfaces: [String: [String: DBusValue]] = [:]
        try enter(message, "a", "{sa{sv}}")
        while try hasNext(message) {
            try enter(message, "e", "sa{sv}")
            let name = try readString(message)
            if let properties = wanted[name] {
                interfaces[name] = try readProperties(message, keeping: properties)
            } else {
                try skip(message, "a{sv}")
            }
            try exit(message)
        }
        try exit(message)
        return interfaces
    }

    /// `a{sv}`: the values of `keeping`, bounded; other properties are skipped unread.
    private func readProperties(_ message: OpaquePointer, keeping: Set<String>) throws(DecodeError) -> [String: DBusValue] {
        var properties: [String: DBusValue] = [:]
        try enter(message, "a", "{sv}")
        while try hasNext(message) {
            try enter(message, "e", "sv")
            let name = try readString(message)
            if keeping.contains(name) {
                properties[name] = try readValue(message, depth: 0)
            } else {
                try skip(message, "v")
            }
            try exit(message)
        }
        try exit(message)
        return properties
    }

    // Over 60 lines on purpose: one case per D-Bus type code, each with its sd-bus read, in one place to check against the spec.
    /// The next value, whatever its type, within `DBusValue`'s bounds.
    private func readValue(_ message: OpaquePointer, depth: Int) throws(DecodeError) -> DBusValue {
        var type: CChar = 0
        var contentsPointer: UnsafePointer<CChar>?
        let rc = api.pointee.message_peek_type(message, &type, &contentsPointer)
        try check(rc)
        guard rc > 0 else { throw DecodeError(detail: "unreadable message (missing value)") }
        let kind = Character(Unicode.Scalar(UInt8(bitPattern: type)))
        let contents = contentsPointer.map { String(cString: $0) } ?? ""
        let signature: String
        switch kind {
        case "a": signature = "a" + contents
        case "r": signature = "(" + contents + ")"
        case "e": signature = "{" + contents + "}"
        case "v": signature = "v"
        default: signature = String(kind)
        }
        if depth >= DBusValue.maximumDepth, "arev".contains(kind) {
            try skip(message, signature)
            return .oversized(signature: signature, reason: "nested deeper than \(DBusValue.maximumDepth)")
        }
        switch kind {
        case "b": return .boolean(try readBasic(message, type, Int32(0)) != 0)
        case "y": return .byte(try readBasic(message, type, UInt8(0)))
        case "n": return .int16(try readBasic(message, type, Int16(0)))
        case "q": return .uint16(try readBasic(message, type, UInt16(0)))
        case "i": return .int32(try readBasic(message, type, Int32(0)))
        case "u": return .uint32(try readBasic(message, type, UInt32(0)))
        case "x": return .int64(try readBasic(message, type, Int64(0)))
        case "t": return .uint64(try readBasic(message, type, UInt64(0)))
        case "d": return .double(try readBasic(message, type, Double(0)))
        case "s", "o", "g":
            var pointer: UnsafePointer<CChar>?
            try check(api.pointee.message_read_basic(message, type, &pointer))
            guard let pointer else { return .string("") }
            let length = strnlen(pointer, DBusValue.maximumStringLength + 1)
            guard length <= DBusValue.maximumStringLength else {
                return .oversized(signature: signature, reason: "longer than \(DBusValue.maximumStringLength) bytes")
            }
            return kind == "o" ? .objectPath(String(cString: pointer)) : .string(String(cString: pointer))
        case "v":
            try enter(message, "v", contents)
            let inner = try readValue(message, depth: depth + 1)
            try exit(message)
            return .variant(inner)
        case "a":
            try enter(message, "a", contents)
            var elements: [DBusValue] = []
            var total = 0
            while try hasNext(message) {
                total += 1
                if elements.count < DBusValue.maximumElements {
                    elements.append(try readValue(message, depth: depth + 1))
                } else {
                    try skip(message, contents)
                }
            }
            try exit(message)
            return total > DBusValue.maximumElements
                ? .oversized(signature: signature, reason: "\(total) elements, more than \(DBusValue.maximumElements)")
                : .array(elements)
        case "r", "e":
            try enter(message, kind, contents)
            var fields: [DBusValue] = []
            while try hasNext(message) { fields.append(try readValue(message, depth: depth + 1)) }
            try exit(message)
            if kind == "e", fields.count == 2 { return .entry(key: fields[0], value: fields[1]) }
            return .structure(fields)
        default:
            try skip(message, signature)
            return .oversized(signature: signature, reason: "a type this reader does not take")
        }
    }

    /// One fixed-size basic value (sd_bus_message_read_basic writes it in place; `b` is an int).
    private func readBasic<Value: BitwiseCopyable>(_ message: OpaquePointer, _ type: CChar, _ initial: Value) throws(DecodeError) -> Value {
        var value = initial
        try check(api.pointee.message_read_basic(message, type, &value))
        return value
    }

    private func errorText(_ message: OpaquePointer) -> String {
        let error = api.pointee.message_get_error(message)
        return [string(error?.pointee.name), string(error?.pointee.message)].compactMap { $0 }.joined(separator: ": ")
    }

    private func string(_ pointer: UnsafePointer<CChar>?) -> String? {
        guard let pointer else { return nil }
        guard strnlen(pointer, DBusValue.maximumStringLength + 1) <= DBusValue.maximumStringLength else { return "(overlong)" }
        return String(cString: pointer)
    }

    private static func type(_ character: Character) -> CChar {
        CChar(bitPattern: character.asciiValue ?? 0)
    }

    private static func failure(_ what: String, _ rc: Int32) -> ReachabilityError {
        ReachabilityError(.systemBus, "\(what): \(String(cString: strerror(-rc)))")
    }
}

/// The one C entry point for replies, match installs and matched signals; `userdata` is the
/// connection (see `addMatch` for why unretained is safe). Always 0: a negative return would
/// make sd_bus_process report the connection as failed.
private let systemBusHandler: csdbus_message_handler = { message, userdata, _ in
    guard let message, let userdata else { return 0 }
    Unmanaged<SystemBusConnection>.fromOpaque(userdata).takeUnretainedValue().handle(message)
    return 0
}
