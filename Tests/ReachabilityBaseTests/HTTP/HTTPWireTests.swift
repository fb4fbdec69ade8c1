import Testing
@testable import ReachabilityBase

/// HTTPWire, the one reader of HTTP's numbers, ports and tokens: hostile values are no value.
@Suite("HTTP wire values")
struct HTTPWireTests {
    static let hostileNumbers = ["", " ", "-1", "+80", "+0", "1e16", "9e18", "1e300", "inf", "-inf", "nan", "0x10", "1.5",
                                 "1_000", " 1", "1 ", "١", "9223372036854775808", "99999999999999999999"]

    @Test("digits: 1*DIGIT up to Int64's maximum", arguments: [
        ("0", 0 as Int64?), ("7", 7), ("0010", 10), ("9223372036854775807", Int64.max),
    ])
    func digits(text: String, value: Int64?) {
        #expect(HTTPWire.digits(text) == value)
        #expect(HTTPWire.digits(Array(text.utf8)) == value)
    }

    @Test("digits: hostile values are no number", arguments: hostileNumbers)
    func hostileDigits(text: String) {
        #expect(HTTPWire.digits(text) == nil)
        #expect(HTTPWire.digits(Array(text.utf8)) == nil)
    }

    @Test("status codes: exactly three digits, 100 to 999")
    func statusCodes() {
        #expect(HTTPWire.statusCode("200") == 200)
        #expect(HTTPWire.statusCode("100") == 100)
        #expect(HTTPWire.statusCode("999") == 999)
        for text in Self.hostileNumbers + ["0", "000", "099", "20", "2000", "0200", "2O6", "+20", "20 "] {
            #expect(HTTPWire.statusCode(text) == nil, "\(text)")
            #expect(HTTPWire.statusCode(Array(text.utf8)) == nil, "\(text)")
        }
    }

    @Test("ports: 1 to 65535 in at most five digits")
    func ports() {
        #expect(HTTPWire.port("80") == 80)
        #expect(HTTPWire.port("1") == 1)
        #expect(HTTPWire.port("65535") == 65535)
        #expect(HTTPWire.port("08080") == 8080)
        for text in Self.hostileNumbers + ["0", "00000", "65536", "000080", "99999"] {
            #expect(HTTPWire.port(text) == nil, "\(text)")
        }
    }

    @Test("chunk sizes: one to eight hex digits")
    func chunkSizes() {
        #expect(HTTPWire.chunkSize(Array("0".utf8)) == 0)
        #expect(HTTPWire.chunkSize(Array("fF".utf8)) == 255)
        #expect(HTTPWire.chunkSize(Array("ffffffff".utf8)) == 0xFFFF_FFFF)
        for text in ["", "-1", "+f", "0x1", "g", " 1", "123456789", "1.5", "inf", "nan"] {
            #expect(HTTPWire.chunkSize(Array(text.utf8)) == nil, "\(text)")
        }
    }

    @Test("percent-encoded octets: exactly two hex digits")
    func percentEncodedOctets() {
        #expect(HTTPWire.percentEncodedOctet(Array("2E".utf8)) == 0x2E)
        #expect(HTTPWire.percentEncodedOctet(Array("ff".utf8)) == 0xFF)
        for text in ["", "f", "+f", "-1", " 1", "1 ", "g0", "100", "0x"] {
            #expect(HTTPWire.percentEncodedOctet(Array(text.utf8)) == nil, "\(text)")
        }
    }

    @Test("tokens and wire-safe values")
    func tokensAndValues() {
        #expect(HTTPWire.isToken("X-Custom_Header!#$%&'*+-.^`|~9"))
        for text in ["", "a b", "a:b", "a\r", "naïve", "a\"b", "(a)", "a/b", "a,b"] {
            #expect(!HTTPWire.isToken(text), "\(text)")
        }
        #expect(HTTPWire.isSafeOnTheWire("Bearer abc\tdef ümlaut"))
        for text in ["a\rb", "a\nb", "a\u{0}b", "a\u{7F}b", "a\u{1B}b"] {
            #expect(!HTTPWire.isSafeOnTheWire(text), "\(text.debugDescription)")
        }
    }
}
