import TestSupport

/// The path fixtures by their short name in these tests.
typealias Fixtures = PathFixtures
