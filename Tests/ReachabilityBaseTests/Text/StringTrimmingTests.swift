import Testing
@testable import ReachabilityBase

/// `trimmingWhitespace()`: HTTP's optional whitespace and a configuration line's padding.
@Suite("Trimming")
struct StringTrimmingTests {
    @Test(arguments: [("  a b \t\r\n", "a b"), ("", ""), (" \r\n ", ""), ("x", "x"), ("\tx=y ", "x=y")])
    func trimsSpacesTabsAndLineEnds(_ text: String, _ expected: String) {
        #expect(text.trimmingWhitespace() == expected)
        #expect(text[...].trimmingWhitespace() == expected)
    }
}
