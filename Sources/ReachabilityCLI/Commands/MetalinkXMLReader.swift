/// The small, strict XML reader behind `download --metalink`: a Metalink file comes from anyone,
/// and Foundation's `XMLParser` lives in FoundationXML, which the CLI may not link
/// (docs/architecture.md, FoundationFootprintTests). It reads only what a Metalink needs:
/// elements, attributes, text, comments, CDATA and the XML declaration. There is no DTD, so no
/// entity can be defined (an entity bomb or an external entity is refused, not expanded); only
/// the five predefined entities and character references are decoded. Size, depth, element and
/// attribute counts are bounded before anything is kept.
struct MetalinkXMLReader {
    /// One element: its qualified name as written, its attributes, its text (the pieces between
    /// its children, joined) and its children.
    struct Element: Sendable, Equatable {
        var name: String
        var attributes: [String: String] = [:]
        var text = ""
        var children: [Element] = []

        /// The name without a namespace prefix (`ml:url` is `url`).
        var localName: Substring { name.split(separator: ":", maxSplits: 1).last ?? Substring(name) }
    }

    /// The bounds every document is held to.
    struct Limits: Sendable, Equatable {
        var maximumBytes = 1 << 20
        var maximumDepth = 16
        var maximumElements = 50_000
        var maximumAttributes = 32
        var maximumNameBytes = 256
    }

    /// A document that is not well-formed, or goes past a bound.
    struct Failure: Error, Sendable, Equatable, CustomStringConvertible {
        var description: String
    }

    private let bytes: [UInt8]
    private let limits: Limits
    private var index = 0

    private init(bytes: [UInt8], limits: Limits) {
        self.bytes = bytes
        self.limits = limits
    }

    /// The document's root element.
    static func parse(_ bytes: [UInt8], limits: Limits = Limits()) throws(Failure) -> Element {
        guard bytes.count <= limits.maximumBytes else {
            throw Failure(description: "it is larger than \(limits.maximumBytes) bytes")
        }
        guard String(validating: bytes, as: UTF8.self) != nil else {
            throw Failure(description: "it is not UTF-8 text")
        }
        var reader = MetalinkXMLReader(bytes: bytes, limits: limits)
        return try reader.document()
    }

    // Over 60 lines on purpose: one pass over the document, every markup form handled where it is met.
    private mutating func document() throws(Failure) -> Element {
        var open: [Element] = []
        var root: Element?
        var elements = 0
        // A byte-order mark is allowed before the declaration.
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { index = 3 }
        while index < bytes.count {
            if bytes[index] != UInt8(ascii: "<") {
                let end = bytes[index...].firstIndex(of: UInt8(ascii: "<")) ?? bytes.count
                let text = try decoded(bytes[index..<end])
                index = end
                if open.isEmpty {
                    guard text.allSatisfy(\.isWhitespace) else { throw Failure(description: "text outside the root element") }
                } else {
                    open[open.count - 1].text += text
                }
            } else if starts(with: "<?") {
                index = try position(after: "?>", what: "processing instruction")
            } else if starts(with: "<!--") {
                index = try position(after: "-->", what: "comment")
            } else if starts(with: "<![CDATA[") {
                guard !open.isEmpty else { throw Failure(description: "CDATA outside the root element") }
                let start = index + 9
                index = try position(after: "]]>", what: "CDATA section")
                open[open.count - 1].text += String(decoding: bytes[start..<(index - 3)], as: UTF8.self)
            } else if starts(with: "<!") {
                // <!DOCTYPE and <!ENTITY: the only way to define entities, so the way to bombs and
                // to external files. A Metalink never needs one.
                throw Failure(description: "it has a document type declaration (<!DOCTYPE or <!ENTITY), which is not accepted")
            } else if starts(with: "</") {
                index += 2
                let name = try readName()
                skipWhitespace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: ">") else { throw Failure(description: "a malformed end tag </\(name)") }
                index += 1
                guard let element = open.popLast(), element.name == name else {
                    throw Failure(description: "the end tag </\(name)> does not match the open element")
                }
                if open.isEmpty { root = element } else { open[open.count - 1].children.append(element) }
                if root != nil { return try finish(root!) }
            } else {
                guard root == nil else { throw Failure(description: "more than one root element") }
                elements += 1
                guard elements <= limits.maximumElements else {
                    throw Failure(description: "it has more than \(limits.maximumElements) elements")
                }
                index += 1
                var (element, isEmpty) = try startTag()
                if isEmpty {
                    element.text = ""
                    if open.isEmpty { return try finish(element) }
                    open[open.count - 1].children.append(element)
                } else {
                    guard open.count < limits.maximumDepth else {
                        throw Failure(description: "its elements are nested deeper than \(limits.maximumDepth) levels")
                    }
                    open.append(element)
                }
            }
        }
        throw Failure(description: open.isEmpty ? "it has no root element" : "it ends inside <\(open.last!.name)>")
    }

    /// After the root: only comments, processing instructions and whitespace may follow.
    private mutating func finish(_ root: Element) throws(Failure) -> Element {
        while index < bytes.count {
            if starts(with: "<!--") {
                index = try position(after: "-->", what: "comment")
            } else if starts(with: "<?") {
                index = try position(after: "?>", what: "processing instruction")
            } else if Character(Unicode.Scalar(bytes[index])).isWhitespace {
                index += 1
            } else {
                throw Failure(description: "content after the root element")
            }
        }
        return root
    }

    /// The rest of a start tag after `<`: name, attributes, and whether it closes itself (`/>`).
    private mutating func startTag() throws(Failure) -> (Element, Bool) {
        var element = Element(name: try readName())
        while true {
            skipWhitespace()
            guard index < bytes.count else { throw Failure(description: "it ends inside <\(element.name)>") }
            if bytes[index] == UInt8(ascii: ">") {
                index += 1
                return (element, false)
            }
            if starts(with: "/>") {
                index += 2
                return (element, true)
            }
            let name = try readName()
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "=") else {
                throw Failure(description: "the attribute \(name) of <\(element.name)> has no value")
            }
            index += 1
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") || bytes[index] == UInt8(ascii: "'") else {
                throw Failure(description: "the attribute \(name) of <\(element.name)> is not quoted")
            }
            let quote = bytes[index]
            guard let end = bytes[(index + 1)...].firstIndex(of: quote) else {
                throw Failure(description: "the attribute \(name) of <\(element.name)> is not closed")
            }
            let raw = bytes[(index + 1)..<end]
            guard !raw.contains(UInt8(ascii: "<")) else { throw Failure(description: "'<' in the attribute \(name)") }
            guard element.attributes[name] == nil else {
                throw Failure(description: "the attribute \(name) appears twice in <\(element.name)>")
            }
            guard element.attributes.count < limits.maximumAttributes else {
                throw Failure(description: "<\(element.name)> has more than \(limits.maximumAttributes) attributes")
            }
            element.attributes[name] = try decoded(raw)
            index = end + 1
        }
    }

    /// An element or attribute name: letters, digits and `_ - . :`, starting with a letter or `_`.
    private mutating func readName() throws(Failure) -> String {
        let start = index
        while index < bytes.count, index - start < limits.maximumNameBytes, Self.isNameByte(bytes[index], first: index == start) {
            index += 1
        }
        guard index > start, index - start < limits.maximumNameBytes else {
            throw Failure(description: "a malformed or overlong name at byte \(start)")
        }
        return String(decoding: bytes[start..<index], as: UTF8.self)
    }

    private static func isNameByte(_ byte: UInt8, first: Bool) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "_"): true
        case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: ":"): !first
        default: false
        }
    }

    /// Text with `&amp;`, `&lt;`, `&gt;`, `&quot;`, `&apos;` and `&#N;`/`&#xH;` decoded; any
    /// other entity is refused (none can be defined without a DTD).
    private func decoded(_ raw: ArraySlice<UInt8>) throws(Failure) -> String {
        guard raw.contains(UInt8(ascii: "&")) else { return String(decoding: raw, as: UTF8.self) }
        var result = ""
        var position = raw.startIndex
        while let ampersand = raw[position...].firstIndex(of: UInt8(ascii: "&")) {
            result += String(decoding: raw[position..<ampersand], as: UTF8.self)
            guard let semicolon = raw[ampersand...].prefix(12).firstIndex(of: UInt8(ascii: ";")) else {
                throw Failure(description: "a bare '&' or an unterminated entity reference")
            }
            let name = String(decoding: raw[(ampersand + 1)..<semicolon], as: UTF8.self)
            if let text = Self.predefinedEntities[name] {
                result += text
            } else {
                guard let scalar = Self.characterReference(name) else {
                    throw Failure(description: "the entity &\(name); is not one of XML's five (no others can be defined)")
                }
                result.unicodeScalars.append(scalar)
            }
            position = semicolon + 1
        }
        return result + String(decoding: raw[position...], as: UTF8.self)
    }

    /// XML's five predefined entities, the only named ones a document without a DTD may use.
    private static let predefinedEntities = ["amp": "&", "lt": "<", "gt": ">", "quot": "\"", "apos": "'"]

    /// `#65` or `#x41` as a scalar; nil for anything else, NUL included.
    private static func characterReference(_ name: String) -> Unicode.Scalar? {
        guard name.first == "#" else { return nil }
        let digits = name.dropFirst()
        let isHex = digits.first == "x"
        let body = isHex ? digits.dropFirst() : digits
        guard !body.isEmpty, body.count <= 8 else { return nil }
        var value: UInt32 = 0
        for character in body {
            guard let digit = character.hexDigitValue, isHex || digit < 10 else { return nil }
            value = value * (isHex ? 16 : 10) + UInt32(digit)
        }
        guard value != 0 else { return nil }
        return Unicode.Scalar(value)
    }

    private func starts(with text: StaticString) -> Bool {
        let count = text.utf8CodeUnitCount
        guard index + count <= bytes.count else { return false }
        let prefix = UnsafeBufferPointer(start: text.utf8Start, count: count)
        return bytes[index..<(index + count)].elementsEqual(prefix)
    }

    /// The index just after the next `terminator`.
    private func position(after terminator: StaticString, what: String) throws(Failure) -> Int {
        let needle = Array(UnsafeBufferPointer(start: terminator.utf8Start, count: terminator.utf8CodeUnitCount))
        var candidate = index
        while candidate + needle.count <= bytes.count {
            if bytes[candidate] == needle[0], bytes[candidate..<(candidate + needle.count)].elementsEqual(needle) {
                return candidate + needle.count
            }
            candidate += 1
        }
        throw Failure(description: "an unterminated \(what)")
    }

    private mutating func skipWhitespace() {
        while index < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[index]) { index += 1 }
    }
}
