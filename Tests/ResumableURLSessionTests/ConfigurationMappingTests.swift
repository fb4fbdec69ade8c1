import Foundation
import Testing
@testable import ResumableURLSession

/// How a background configuration's `timeoutIntervalForResource` reaches the agent (issue 32
/// item 5): it becomes `BackgroundSessionSettings.timeoutIntervalForResource`, from which the
/// agent's `BackgroundRegistry` gives each task its deadline (created + this; tested there).
@Suite struct ConfigurationMappingTests {
    static let week: TimeInterval = 7 * 24 * 3600
    static let cases: [(given: TimeInterval, sent: TimeInterval)] = [
        (week, week), (60, 60), (0.5, 0.5), (0, week), (-1, week), (.nan, week), (.infinity, week), (1e300, 100 * 365 * 86_400),
    ]

    @Test(arguments: cases)
    func theResourceTimeoutIsTheBackgroundTasksDeadline(given: TimeInterval, sent: TimeInterval) {
        var configuration = ResumableURLSession.Configuration(stateDirectory: URL(fileURLWithPath: "/nonexistent"))
        #expect(configuration.timeoutIntervalForResource == 7 * 24 * 3600, "Apple's default")
        configuration.timeoutIntervalForResource = given
        #expect(configuration.backgroundSettings.timeoutIntervalForResource == sent)
    }
}
