import Testing
@testable import ReachabilityBase

/// The texts issue 20 names, which once trapped or were read differently in different places.
let hostileTexts = ["0", "-1", "1e16", "9e18", "9223372036854775807", "1e300", "inf", "nan", "0x10", " 5", "5 ", "\t5", "",
                    "1e", ".", "+5", "1_000", "５", "1e99999"]

@Suite("decimal text")
struct DecimalTextTests {
    @Test(arguments: [("30", 30.0), ("0.25", 0.25), (".5", 0.5), ("5.", 5), ("1e3", 1000), ("1E-3", 0.001), ("2.5e+2", 250)])
    func acceptsDecimalNumbers(text: String, expected: Double) {
        #expect(DecimalText.number(text) == expected)
    }

    @Test(arguments: ["", ".", "e5", "1e", "+5", "-1", "0x10", " 5", "5 ", "nan", "inf", "infinity", "1_000", "５", "1..2", "1e+"])
    func refusesEverythingElse(text: String) {
        #expect(DecimalText.number(text) == nil)
    }

    @Test func aHugeExponentIsInfinityForTheKindToRefuseOrClamp() {
        #expect(DecimalText.number("1e99999") == .infinity)
    }

    @Test func integersAreDigitsThatFitInt64() {
        #expect(DecimalText.integer("64") == 64)
        #expect(DecimalText.integer("9223372036854775807") == .max)
        #expect(DecimalText.integer("9223372036854775808") == nil)
        for text in ["", "-1", "+1", "1.0", "1e3", " 1", "0x10", "٣"] { #expect(DecimalText.integer(text) == nil, "\(text)") }
    }
}

@Suite("value kinds against hostile texts")
struct HostileTextTests {
    @Test(arguments: hostileTexts)
    func secondsAreInRangeOrRefused(text: String) {
        let kind = Seconds(.seconds(1)...Duration.seconds(86_400))
        #expect(throws: InvalidValue(text: text, expectation: "a number of seconds from 1 to 86400")) { try kind.parse(text) }
        #expect(Seconds(.zero...Duration.maximumCountable).value(from: text) == (text == "0" ? .zero : nil))
    }

    @Test(arguments: hostileTexts)
    func limitsAreInRangeForeverOrRefused(text: String) {
        switch SecondsOrForever().value(from: text) {
        case .after(let span)?: #expect(span >= .zero && span <= .maximumCountable)
        case .never?: #expect(["1e16", "9e18", "9223372036854775807", "1e300", "inf", "1e99999"].contains(text))
        case nil: #expect(!["0", "1e16", "inf"].contains(text))
        }
    }

    @Test(arguments: hostileTexts)
    func byteCountsAreInRangeOrRefused(text: String) {
        let kind = ByteCount(1024...(1 << 40))
        if let value = kind.value(from: text) { #expect(kind.range.contains(value)) }
        #expect(kind.value(from: text) == nil)
    }

    @Test(arguments: hostileTexts)
    func countsAreInRangeOrRefused(text: String) {
        #expect(Count(1...64).value(from: text) == nil)
        #expect(Count(0...1_000_000).value(from: text) == (text == "0" ? 0 : nil))
    }
}

@Suite("seconds")
struct SecondsTests {
    @Test func roundsUpToTheMillisecond() {
        #expect(Seconds.positive().value(from: "0.0001") == .milliseconds(1))
        #expect(Seconds.positive().value(from: "1.0005") == .milliseconds(1001))
        #expect(Seconds(.zero...Duration.seconds(10)).value(from: "0") == .zero)
        #expect(Seconds.positive().value(from: "0") == nil)
    }

    @Test func theUpperBoundIsHeldToOneHundredYears() {
        #expect(Seconds(.zero...Duration.seconds(Int64.max)).range.upperBound == .maximumCountable)
        #expect(Seconds.positive().value(from: "3155760000") == .maximumCountable)
        #expect(Seconds.positive().value(from: "3155760000.001") == nil)
    }

    @Test func errorsSayTheRange() {
        #expect(Seconds(.seconds(1)...Duration.seconds(86_400)).expectation == "a number of seconds from 1 to 86400")
        #expect(Seconds.positive(upTo: .seconds(31_536_000)).expectation == "a number of seconds above 0, at most 31536000")
        #expect(Seconds.positive().expectation == "a number of seconds above 0")
        #expect(Seconds(.zero...Duration.maximumCountable).expectation == "a number of seconds, 0 or more")
        #expect(SecondsOrForever().expectation == "a number of seconds, 0 or more, or 'inf'")
        #expect(throws: InvalidValue(text: "nan", expectation: "a number of seconds, 0 or more, or 'inf'")) {
            try SecondsOrForever().parse("nan")
        }
    }

    @Test func foreverIsInfOrBeyondOneHundredYears() {
        #expect(SecondsOrForever().value(from: "inf") == .never)
        #expect(SecondsOrForever().value(from: "infinity") == .never)
        #expect(SecondsOrForever().value(from: "1e16") == .never)
        #expect(SecondsOrForever().value(from: "30") == .after(.seconds(30)))
        #expect(SecondsOrForever().value(from: "0") == .after(.zero))
        #expect(SecondsOrForever(minimum: .seconds(1)).value(from: "0.5") == nil)
        #expect(TimeLimit.never.duration == nil)
    }
}

@Suite("bytes, counts, switches and environment values")
struct ByteCountTests {
    @Test(arguments: [("12345", 12345), ("500k", 512_000), ("2M", 2_097_152), ("1.5g", 1_610_612_736), ("1t", 1 << 40),
                      ("0.5k", 512), ("1e3", 1000)] as [(String, Int64)])
    func suffixesAre1024Based(text: String, expected: Int64) {
        #expect(ByteCount.rate(1...(1 << 50)).value(from: text) == expected)
    }

    @Test func roundsDownAndKeepsToTheRange() {
        #expect(ByteCount.rate(1...(1 << 50)).value(from: "1.9") == 1)
        #expect(ByteCount.rate(1...(1 << 50)).value(from: "0.5") == nil)
        #expect(ByteCount(1024...(1 << 40)).value(from: "1023") == nil)
        #expect(ByteCount(1024...(1 << 40)).value(from: "2t") == nil)
        #expect(ByteCount(1024...(1 << 40)).value(from: "k") == nil)
    }

    @Test func errorsSayTheRange() {
        #expect(ByteCount(1024...(1 << 40)).expectation == "a number of bytes (k, m, g, t: 1024-based) from 1k to 1t")
        #expect(ByteCount.rate(1...(1 << 50)).expectation == "bytes per second, like 500k or 2m, from 1 to 1024t")
        #expect(Count(1...64).expectation == "a number from 1 to 64")
    }

    @Test func switches() {
        #expect(YesOrNo().value(from: "Yes") == true)
        #expect(YesOrNo().value(from: "0") == false)
        #expect(YesOrNo().value(from: "maybe") == nil)
    }

    @Test func environmentValuesAreUnsetEmptyOrParsed() throws {
        let knob = EnvironmentValue("KNOB", Count(0...10))
        #expect(try knob.value(in: [:]) == nil)
        #expect(try knob.value(in: ["KNOB": ""]) == nil)
        #expect(try knob.value(in: ["KNOB": "7"]) == 7)
        let error = #expect(throws: InvalidValue.self) { try knob.value(in: ["KNOB": "1e300"]) }
        #expect(error?.message(for: "KNOB") == "KNOB: expected a number from 0 to 10, got '1e300'")
    }
}
